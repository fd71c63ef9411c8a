"""(to be filled)"""
__all__ = []
