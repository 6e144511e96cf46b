"""The torch helpers (`torch/_*.py` of a generated package)."""
