"""The book's build machinery: run each tool from the repository root as `python -m tools.NAME`."""
