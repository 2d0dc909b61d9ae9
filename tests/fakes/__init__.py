"""In-memory stand-ins the fast tests use behind the product's own protocols; never shipped in the wheel."""
