"""What the pre-step saves, and the routing rules the traces prove would save more.

Plain data in, plain data out: the caller (the workbench, a script) reads its recorded runs into
:class:`Observation` values. Two questions are answered:

* :func:`savings`: how many LLM turns, tokens and milliseconds the pre-step's calls replaced, and
  in how many runs the model called again a tool the pre-step had already called (the SDK page's
  troubleshooting case, answered with its advice :data:`RECALL_ADVICE`).
* :func:`mine`: for each tool the model called where no rule did, a readable rule in the
  expression language (docs/expressions.md) that would have made the call: a condition learned by
  sequential covering (RIPPER/CN2 style: conjunctions of literals on the query's words, context
  values, DataPart keys and values, added while they separate the model's calls from the rest),
  and each argument derived from the request (the whole query, a context value, a DataPart value,
  a pattern found in the query, a constant) only when it reproduces the model's value on nearly
  every run. Each candidate is then replayed through the engine itself (``run_prestep``, dry run)
  on runs held out from learning, and kept only above the precision asked for.

The work splits in three passes over partitions of the runs, so that a caller can spread them
over processes or Celery workers: :func:`vocabulary` (map) + :func:`merge_vocabularies` (reduce),
:func:`featurize` (map; the learner then runs on small integer sets, :func:`learn`), and
:func:`replay` (map) + :meth:`Tally.merge` (reduce), then :func:`select`. :func:`mine` chains them
in one process. Nothing here changes anything: a suggestion is a proposal.
"""

from llamon_agent.suggest.features import (
    Features,
    Row,
    Vocabulary,
    featurize,
    merge_vocabularies,
    row_from_json,
    rows_to_json,
    vocabulary,
    vocabulary_from_json,
    vocabulary_to_json,
)
from llamon_agent.suggest.mining import (
    Candidate,
    Mined,
    Rejected,
    Suggestion,
    Tally,
    learn,
    mine,
    model_noise,
    replay,
    select,
)
from llamon_agent.suggest.savings import RECALL_ADVICE, Call, Observation, Savings, Turn, savings, turn_value

__all__ = [
    "RECALL_ADVICE",
    "Call",
    "Candidate",
    "Features",
    "Mined",
    "Observation",
    "Rejected",
    "Row",
    "Savings",
    "Suggestion",
    "Tally",
    "Turn",
    "Vocabulary",
    "featurize",
    "learn",
    "merge_vocabularies",
    "mine",
    "model_noise",
    "replay",
    "row_from_json",
    "rows_to_json",
    "savings",
    "select",
    "turn_value",
    "vocabulary",
    "vocabulary_from_json",
    "vocabulary_to_json",
]
