"""Adapters that plug turnstore into agent frameworks' own history and session interfaces.

Each module imports its framework, so import one only when that framework is installed
(``pip install "turnstore[<framework>]"``); importing :mod:`turnstore` never imports any of them.
"""
