"""tether's tools and honest stop inside other agent frameworks.

Each module serves one framework and needs that framework installed, as an extra of
its own: `tether.integrations.openai_agents` (`pip install 'tether[openai-agents]'`)
for the OpenAI Agents SDK, `tether.integrations.pydantic_ai` (`pip install
'tether[pydantic-ai]'`) for pydantic-ai. Importing a module without its extra raises
`ImportError` with the line that says how to install it.
"""

from __future__ import annotations

__all__ = ()
