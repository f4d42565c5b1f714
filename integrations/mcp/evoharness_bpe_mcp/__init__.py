"""evoharness-bpe over the Model Context Protocol: `evoharness mcp`.

Any MCP client (desktop assistants, IDEs, the OpenAI Agents SDK, LangGraph agents through
`langchain-mcp-adapters`) gets the four meta-actions, `start_episode`/`finish_episode` and the
dashboard (resource ``bpe://dashboard`` and prompt ``dashboard``) without integration code.
"""

from .server import DASHBOARD_URI, BPEServer
from .session import EpisodeSession, SessionSettings
from .tenants import TenantError, TenantMap

__all__ = ["BPEServer", "DASHBOARD_URI", "EpisodeSession", "SessionSettings", "TenantError", "TenantMap"]
