"""Entry point for ``python -m olake_cli``."""

from olake_cli.cli.app import main

if __name__ == "__main__":
    main()
