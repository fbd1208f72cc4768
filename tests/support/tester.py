"""The live tester's Execute as a person uses it: ask, read the calls it names, confirm them."""

from __future__ import annotations

import html
import re
from typing import Any

CONFIRM = re.compile(r'id="execute-confirm-calls".*?name="execute" value="(1:[0-9a-f]+)"', re.S)


def execute_confirmed(client: Any, url: str, data: dict[str, Any], **extra: Any) -> Any:
    """Post Execute; when the page asks to confirm the live calls, confirm exactly those."""
    response = client.post(url, {**data, "execute": "1"}, **extra)
    found = CONFIRM.search(html.unescape(response.content.decode()))
    if found is None:
        return response
    return client.post(url, {**data, "execute": found.group(1)}, **extra)
