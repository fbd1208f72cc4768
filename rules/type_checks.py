"""Types in request data: where a rule compares a DataPart value with a number.

A2A DataParts are JSON written by other systems, and a vital sign or an amount often arrives as text
(``{"spo2": "86"}``). ``data_get("spo2") < 90`` then fails the whole pre-step (a text cannot be
compared with a number) for every request carrying it. The static checks warn where a rule compares
a DataPart value with a number literal without converting it; ``float(data_get("spo2", 0)) < 90``
(or ``int(...)``) converts it, failing only when the text is not a number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext as _

from llamon_agent.expr.reads import reads


def datapart_number_warnings(rule: Mapping[str, Any]) -> list[str]:
    """One sentence for each comparison of an unconverted DataPart value with a number in ``when``
    (which ones: the engine says, llamon_agent.expr.reads)."""
    return [
        _(
            "%(value)s is compared with a number, but a DataPart value may arrive as text "
            '(such as "86"): the whole pre-step then fails. Convert it: float(%(value)s).'
        )
        % {"value": read}
        for read in reads(str(rule.get("when", ""))).data_numbers
    ]
