"""`evoharness view`: one self-contained HTML page that steps through an episode of a trace."""

from .page import episode_steps, render_page, write_page

__all__ = ["episode_steps", "render_page", "write_page"]
