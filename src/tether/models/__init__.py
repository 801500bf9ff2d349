"""The model side of the agent loop: the `Model` protocol and two models.

A scripted model and an OpenAI-compatible one, chosen by a spec string with
`model_from_spec`.

```python
from tether.models import model_from_spec

model = model_from_spec("scripted:moves.jsonl")   # a file of moves, played in order
model = model_from_spec("openai:gpt-4o")          # TETHER_MODEL_URL / TETHER_MODEL_KEY
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._openai import OpenAIModel as OpenAIModel
from ._scripted import SCRIPT_VERSION as SCRIPT_VERSION
from ._scripted import Move as Move
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import read_script as read_script
from ._scripted import script_from_transcript as script_from_transcript
from ._scripted import write_script as write_script
from ._types import Message as Message
from ._types import Model as Model
from ._types import ModelError as ModelError
from ._types import ModelRequest as ModelRequest
from ._types import Role as Role
from ._types import StepDone as StepDone
from ._types import StreamEvent as StreamEvent
from ._types import TextDelta as TextDelta
from ._types import ToolCall as ToolCall
from ._types import ToolCallDelta as ToolCallDelta
from ._types import ToolSpec as ToolSpec
from ._types import Usage as Usage

if TYPE_CHECKING:
    from .._config import Config

__all__ = (
    "SCRIPT_VERSION",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "Move",
    "OpenAIModel",
    "Role",
    "ScriptedModel",
    "StepDone",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolSpec",
    "Usage",
    "model_from_spec",
    "read_script",
    "script_from_transcript",
    "write_script",
)


def model_from_spec(spec: str, *, config: Config | None = None) -> Model:
    """Build a model from `scripted:<file>` or `openai:<model>`.

    Raises:
        ModelError: the spec names no known kind, the script is invalid, or the
            endpoint or key is missing.
    """
    kind, _, rest = spec.partition(":")
    match kind:
        case "scripted":
            if not rest:
                raise ModelError("name the script file: scripted:moves.jsonl")
            return ScriptedModel.from_file(rest)
        case "openai":
            return OpenAIModel(rest, config=config)
        case _:
            raise ModelError(
                f"unknown model {spec!r}: use scripted:<file> or openai:<model>"
            )
