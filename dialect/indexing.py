"""(to be filled)"""
