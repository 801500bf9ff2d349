"""The built-in image command: renders a prompt's text into a PNG with Pillow.

Run as `python _render_png.py --out PATH PROMPT` (by path, so it needs only Pillow).
It needs no network and no model; it stands in until `image_command` names a real
image model (see docs/tools-process.md). It is deliberately not a tether module
import: the GenerateImages tool runs it as a command, like any other image command.
"""

from __future__ import annotations

import argparse
import hashlib
import textwrap
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

__all__ = ("main", "render")

SIZE = 512
"""Width and height of the image, pixels."""


def render(prompt: str, out: Path) -> None:
    """Write a square PNG of `SIZE` pixels showing `prompt` on a colour drawn from its text."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    background = (digest[0] // 2 + 64, digest[1] // 2 + 64, digest[2] // 2 + 64)
    image = Image.new("RGB", (SIZE, SIZE), background)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    lines = textwrap.wrap(prompt, width=60)[:30] or [""]
    y = 16
    for line in lines:
        draw.text((16, y), line, fill=(255, 255, 255), font=font)
        y += 16
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, format="PNG")


def main(argv: list[str] | None = None) -> int:
    """Parse `--out PATH PROMPT` and render; return the exit code."""
    parser = argparse.ArgumentParser(description="Render a prompt into a PNG.")
    parser.add_argument("--out", required=True, type=Path, help="PNG file to write")
    parser.add_argument("prompt", help="text of the image")
    args = parser.parse_args(argv)
    render(args.prompt, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
