"""`python -m magnetar_operator` is `magnetar-operator`."""

from .main import main

main()
