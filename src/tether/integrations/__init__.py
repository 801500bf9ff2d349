"""tether's tools and honest stop inside other agent frameworks.

Each module serves one framework and needs that framework installed, as an extra of
its own: `tether.integrations.openai_agents` (`pip install 'tether[openai-agents]'`)
for the OpenAI Agents SDK. Importing a module without its extra raises `ImportError`
with the line that says how to install it.
"""

from __future__ import annotations

__all__ = ()
