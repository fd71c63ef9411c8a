"""`python -m mirax.dialect` prints the generated IRDL definition of the dialect."""
import sys

from . import irdl_text

sys.stdout.write(irdl_text())
