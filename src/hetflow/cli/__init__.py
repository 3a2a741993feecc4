"""Thin typer commands that call the stages."""
