"""A LangGraph agent that gets the BPE workspace from `evoharness mcp` through langchain-mcp-adapters.

    python examples/mcp_langgraph_agent.py          # offline: a scripted model drives the agent

The server runs as a subprocess over stdio; one MCP session is kept open for the whole run, so
the agent's meta-actions share one workspace. Before each model call a middleware reads the
``dashboard`` prompt from the server and puts it into the system message. A second session of
the same namespace recalls the lesson the first one noted.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools


class DashboardFromServer(AgentMiddleware):
    """Puts the server's dashboard prompt into the system message before every model call."""

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        prompt = await self.session.get_prompt("dashboard")
        dashboard = prompt.messages[0].content.text
        return await handler(request.override(system_message=SystemMessage(f"You migrate CRM data.\n\n{dashboard}")))


def scripted(first: bool) -> ScriptedChatModel:
    if first:
        return ScriptedChatModel(responses=[
            ai_tool_call("start_episode", {"goal": "Migrate customers C-1 and C-3", "subgoals": ["upload", "report"]}),
            ai_tool_call("track", {"key": "crm.phone_format", "value": "phone needs a country code field"}),
            ai_tool_call("note", {"text": "Split phone numbers into country code and number before upload", "tags": ["crm"]}),
            ai_tool_call("commit", {"subgoal": "upload", "status": "done"}),
            ai_tool_call("finish_episode", {"success": True}),
            "Uploaded; phone numbers need their country code split first.",
        ])
    return ScriptedChatModel(responses=[
        ai_tool_call("start_episode", {"goal": "Migrate customer C-2"}),
        ai_tool_call("recall", {"query": "phone number upload"}),
        ai_tool_call("finish_episode", {"success": True}),
        "I will split phone numbers first.",
    ])


async def run(store: Path) -> int:
    client = MultiServerMCPClient({
        "bpe": {"transport": "stdio", "command": sys.executable,
                "args": ["-m", "evoharness_bpe_mcp", "--store", str(store), "--namespace", "acme/crm-agent"]},
    })
    for first, task in [(True, "Migrate customers C-1 and C-3"), (False, "Migrate customer C-2")]:
        async with client.session("bpe") as session:  # one MCP session = one workspace
            tools = await load_mcp_tools(session)
            model = scripted(first)
            agent = create_agent(model, tools, middleware=[DashboardFromServer(session)])
            out = await agent.ainvoke({"messages": [HumanMessage(task)]})
            print(f"--- {task}: {out['messages'][-1].content}")
            for message in out["messages"]:
                if message.type == "tool":
                    print(f"  {message.name}: {message.content}")
            last_prompt = model.calls[-2][0].content  # before finish_episode
    print("--- the system message the model saw after recall:")
    print(last_prompt)
    return 0


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(run(Path(tmp) / "experience.db"))


if __name__ == "__main__":
    sys.exit(main())
