"""What a case is judged by: :class:`CaseRun` (what one run of a case did), the
:class:`Evaluation` an evaluator gives, and the built-in evaluators.

An evaluator is an :class:`Evaluator` (its fields are its settings, so it can be written to a
dataset file) or a plain function ``fn(run: CaseRun) -> bool | float | Evaluation``. A ``bool``
is an assertion (the case fails when one is ``False``); a ``float`` is a score from 0 to 1,
averaged into the case's score. An evaluator that raises gives an evaluation with its
``error``, and the case's status is ``"error"``: a broken check never passes by accident.

The built-ins, by what they look at:

- the answer and the typed output: :class:`Equals`, :class:`EqualsExpected`, :class:`Contains`;
- the trajectory: :class:`ToolCalled`, :class:`ToolNotCalled`, :class:`ToolOrder`,
  :class:`MaxToolCalls`, :class:`SameToolCalls`;
- the budgets: :class:`MaxCost`, :class:`MaxTokens`, :class:`MaxTurns`, :class:`MaxDuration`;
- a model's judgement: :class:`~agentkit.evals.judge.LLMJudge`.

Those that pydantic-evals also has (``Equals``, ``EqualsExpected``, ``Contains``,
``MaxDuration``, ``MaxToolCalls``, ``LLMJudge``) carry its names and arguments, so a dataset
file moves between the two.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from .._serialize import to_jsonable
from ..results import RunUsage
from .recording import Divergence, Recording, ToolCallRecord, Turn

if TYPE_CHECKING:
    from ..abort import AbortSignal
    from ..agent import Agent
    from ..budgets import Budgets

On = Literal["output", "answer"]
"""What a check looks at: ``"output"`` is the typed output when the run had one, else the
answer's text; ``"answer"`` is always the final answer's text."""


class CaseLike(Protocol):
    """The case a :class:`CaseRun` ran, as an evaluator reads it: an
    :class:`~agentkit.evals.cases.Case` (a Protocol because a case holds its evaluators, so
    :mod:`~agentkit.evals.cases` stands on this module, not under it)."""

    name: str
    turns: list[Turn]
    history: list[Any]
    expected_output: Any
    metadata: dict[str, Any]
    evaluators: list[Evaluator]
    recording: Recording | None


@dataclass
class CaseRun:
    """What one run of one case did: the input of every evaluator.

    ``answer`` is the final answer's text and ``output`` the typed output (``None`` without an
    ``output_type``); ``messages`` are the new messages of the case's turns, ``tool_calls`` its
    calls with their results; ``usage`` adds up every turn (``turns`` counts model requests);
    ``duration`` is seconds of the agent's runs. ``divergence`` says where a replay left its
    recording. ``signal`` is the evaluation's abort signal and ``judge`` makes the agent a
    model-judged evaluator asks (``None`` when the run was given none), under
    ``judge_budgets``; what a judge spends goes in ``judge_usage``.
    """

    case: CaseLike
    mode: Literal["live", "replay"] = "live"
    answer: str = ""
    output: Any = None
    messages: list[Any] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    usage: RunUsage = field(default_factory=RunUsage)
    turns: int = 0
    duration: float = 0.0
    stop_reason: str = "stop"
    error: str | None = None
    divergence: Divergence | None = None
    signal: AbortSignal | None = None
    judge: Callable[[], Agent] | None = None
    judge_budgets: Budgets | None = None
    judge_usage: RunUsage = field(default_factory=RunUsage)

    def actual(self, on: On = "output") -> Any:
        """The run's value that a check ``on`` the output or the answer compares."""
        if on == "answer" or self.output is None:
            return self.answer
        return self.output

    def expected(self, on: On = "output") -> Any:
        """The case's reference for a check ``on`` the output or the answer: the case's
        ``expected_output``, else what its recording answered (``None`` when it has neither)."""
        case = self.case
        recording = case.recording
        if on == "answer":
            if recording is not None:
                return recording.answer
            return case.expected_output if isinstance(case.expected_output, str) else None
        if case.expected_output is not None:
            return case.expected_output
        return recording.answer if recording is not None else None


@dataclass
class Evaluation:
    """One verdict on one case: ``value`` is an assertion (``bool``) or a score (0 to 1);
    ``reason`` says why; ``error`` is set, and ``value`` is ``False``, when the evaluator
    failed."""

    name: str
    value: bool | float
    reason: str | None = None
    error: str | None = None

    @property
    def passed(self) -> bool:
        """Whether this evaluation lets the case pass (a score always does; its value counts in
        the case's score)."""
        if self.error is not None:
            return False
        return self.value is not False

    def to_dict(self) -> dict[str, Any]:
        """As JSON data."""
        return {"name": self.name, "value": self.value, "reason": self.reason, "error": self.error}


EvaluatorResult = bool | float | Evaluation | Sequence[Evaluation]


class Evaluator:
    """A check of a :class:`CaseRun`. Subclasses are dataclasses whose fields are their
    settings: :meth:`spec` writes them in the pydantic-evals form (``Name``, ``{Name: arg}`` or
    ``{Name: {field: value}}``) and :func:`evaluator_from_spec` reads them back.

    :meth:`evaluate` is called on a worker thread of the runner, once per case, and may block
    (a judge asks a model); it should honour ``run.signal`` if it waits.
    """

    spec_name: ClassVar[str] = ""
    """The name in a dataset file; the class name when empty."""

    @property
    def name(self) -> str:
        """The name its evaluations carry."""
        return getattr(self, "evaluation_name", None) or self.serial_name()

    @classmethod
    def serial_name(cls) -> str:
        """The evaluator's name in a dataset file."""
        return cls.spec_name or cls.__name__

    def evaluate(self, run: CaseRun) -> EvaluatorResult:  # pragma: no cover - abstract
        """Judge ``run``."""
        raise NotImplementedError

    def spec(self) -> str | dict[str, Any]:
        """This evaluator in a dataset file: its name alone when every setting is the default,
        ``{name: value}`` when only its first field is set, else ``{name: {field: value}}``."""
        arguments: dict[str, Any] = {}
        declared = fields(self)  # type: ignore[arg-type]  # subclasses are dataclasses
        for item in declared:
            value = getattr(self, item.name)
            if item.default is not MISSING and value == item.default:
                continue
            if item.default_factory is not MISSING and value == item.default_factory():
                continue
            arguments[item.name] = to_jsonable(value)
        if not arguments:
            return self.serial_name()
        first = declared[0].name
        if list(arguments) == [first] and not isinstance(arguments[first], dict):
            return {self.serial_name(): arguments[first]}
        return {self.serial_name(): arguments}


@dataclass
class FunctionEvaluator(Evaluator):
    """A plain function ``fn(run) -> bool | float | Evaluation`` as an evaluator; its
    evaluations carry the function's name. It lives in code: a dataset file cannot hold it."""

    fn: Callable[[CaseRun], Any]

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", None) or type(self.fn).__name__

    def evaluate(self, run: CaseRun) -> EvaluatorResult:
        return self.fn(run)

    def spec(self) -> str | dict[str, Any]:
        raise TypeError(
            f"evaluator {self.name!r} is a Python function: a dataset file cannot hold it; "
            "add it in code after loading the file (dataset.evaluators.append(...))"
        )


def as_evaluator(value: Evaluator | Callable[[CaseRun], Any]) -> Evaluator:
    """``value`` as an :class:`Evaluator` (a function is wrapped)."""
    if isinstance(value, Evaluator):
        return value
    if callable(value):
        return FunctionEvaluator(value)
    raise TypeError(f"an evaluator is an Evaluator or a function of a CaseRun, not {value!r}")


def as_evaluations(evaluator: Evaluator, value: Any) -> list[Evaluation]:
    """What ``evaluator`` returned, as evaluations (a bad return value is an error)."""
    if isinstance(value, Evaluation):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, Evaluation) for v in value):
        return list(value)  # several verdicts, or none (nothing to judge this case by)
    if isinstance(value, bool):
        return [Evaluation(evaluator.name, value)]
    if isinstance(value, (int, float)) and 0 <= value <= 1:
        return [Evaluation(evaluator.name, float(value))]
    return [
        Evaluation(
            evaluator.name,
            False,
            error=f"returned {value!r}; an evaluator returns a bool, a score from 0 to 1 or "
            "an Evaluation",
        )
    ]


# --- the answer and the typed output -----------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    """Equality across forms: a pydantic object equals its JSON data (a file's expectation)."""
    return bool(a == b) or to_jsonable(a) == to_jsonable(b)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(to_jsonable(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Equals(Evaluator):
    """The output (or the answer, ``on="answer"``) equals ``value``."""

    value: Any
    on: On = "output"
    evaluation_name: str | None = field(default=None, kw_only=True)

    def evaluate(self, run: CaseRun) -> EvaluatorResult:
        actual = run.actual(self.on)
        if _same(actual, self.value):
            return True
        return Evaluation(self.name, False, f"{_short(actual)} != {_short(self.value)}")


@dataclass
class EqualsExpected(Evaluator):
    """The output (or the answer, ``on="answer"``) equals the case's reference: its
    ``expected_output``, else what its recording answered. A case with no reference is not
    judged by it (no evaluation)."""

    on: On = "output"
    evaluation_name: str | None = field(default=None, kw_only=True)

    def evaluate(self, run: CaseRun) -> EvaluatorResult:
        expected = run.expected(self.on)
        if expected is None:
            return []
        actual = run.actual(self.on)
        if _same(actual, expected):
            return True
        return Evaluation(self.name, False, f"{_short(actual)} != expected {_short(expected)}")


@dataclass
class Contains(Evaluator):
    """The output (or the answer, ``on="answer"``) contains ``value``: a substring of a text,
    an item of a list, or a subset of an object's fields."""

    value: Any
    case_sensitive: bool = True
    as_strings: bool = False
    on: On = "output"
    evaluation_name: str | None = field(default=None, kw_only=True)

    def evaluate(self, run: CaseRun) -> EvaluatorResult:
        actual = to_jsonable(run.actual(self.on))
        wanted = to_jsonable(self.value)
        if self.as_strings or isinstance(actual, str):
            text, part = str(actual), str(wanted)
            if not self.case_sensitive:
                text, part = text.lower(), part.lower()
            found = part in text
        elif isinstance(actual, dict) and isinstance(wanted, dict):
            found = all(k in actual and actual[k] == v for k, v in wanted.items())
        elif isinstance(actual, list):
            found = wanted in actual
        else:
            found = False
        if found:
            return True
        return Evaluation(self.name, False, f"{_short(wanted)} not in {_short(actual)}")


# --- the trajectory ---------------------------------------------------------------------------


def _arguments_match(arguments: Mapping[str, Any], wanted: Mapping[str, Any], regex: bool) -> bool:
    """``wanted``'s fields are in ``arguments`` with equal values (strings as regular
    expressions searched in the value's text when ``regex``)."""
    for key, value in wanted.items():
        if key not in arguments:
            return False
        actual = arguments[key]
        if regex and isinstance(value, str):
            if re.search(value, actual if isinstance(actual, str) else str(to_jsonable(actual))):
                continue
            return False
        if not _same(actual, value):
            return False
    return True


def _names(calls: Sequence[ToolCallRecord]) -> str:
    return ", ".join(call.name for call in calls) or "no tool"


@dataclass
class ToolCalled(Evaluator):
    """The tool ``tool`` was called at least ``min_calls`` times, with ``arguments`` among its
    arguments when given (values equal; with ``regex``, string values are patterns searched in
    the argument's text)."""

    tool: str
    arguments: dict[str, Any] | None = None
    min_calls: int = 1
    regex: bool = False
    evaluation_name: str | None = field(default=None, kw_only=True)

    def evaluate(self, run: CaseRun) -> EvaluatorResult:
        matching = [
            call
            for call in run.tool_calls
            if call.name == self.tool
            and (self.arguments is None or _arguments_match(call.arguments, self.arguments,
                                                            self.regex))
        ]  # fmt: skip
        if len(matching) >= self.min_calls:
            return True
        shown = "" if self.arguments is None else f" with {_short(self.arguments)}"
        return Evaluation(
            self.name,
            False,
            f"{self.tool}{shown} called {len(matching)} time(s), wanted at least "
            f"{self.min_calls}; calls: {_names(run.tool_calls)}",
        )


@dataclass
class ToolNotCalled(Evaluator):
    """The tool ``tool`` was never called."""

    tool: str
    evaluation_name: str | None = field(default=None, kw_only=True)

    def evaluate(self, run: CaseRun) -> EvaluatorResult:
        count = sum(call.name == self.tool for call in run.tool_calls)
        if not count:
            return True
        return Evaluation(self.name, False, f"{self.tool} was called {count} time(s)")


@dataclass
class ToolOrder(Evaluator):
    """The tools were called in this order: ``tools`` appear as a subsequence of the calls
    (other calls may come between), or are exactly the calls with ``exact``."""

    tools: list[str]
    exact: bool = False
    evaluation_name: str | None = field(default=None, kw_only=True)

    def evaluate(self, run: CaseRun) -> EvaluatorResult:
        made = [call.name for call in run.tool_calls]
        if self.exact:
            found = made == list(self.tools)
        else:
            remaining = iter(made)
            found = all(any(name == want for name in remaining) for want in self.tools)
        if found:
            return True
        return Evaluation(
            self.name, False, f"calls were [{', '.join(made)}], wanted [{', '.join(self.tools)}]"
        )


@dataclass
class MaxToolCalls(Evaluator):
    """At most ``max_calls`` tool calls (of the tool ``tool`` when given)."""

    max_calls: int
    tool: str | None = None
    evaluation_name: str | None = field(default=None, kw_only=True)

    def evaluate(self, run: CaseRun) -> EvaluatorResult:
        count = sum(self.tool is None or call.name == self.tool for call in run.tool_calls)
        if count <= self.max_calls:
            return True
        what = f"{self.tool} calls" if self.tool else "tool calls"
        return Evaluation(self.name, False, f"{count} {what} > {self.max_calls}")


@dataclass
class SameToolCalls(Evaluator):
    """The run called the same tools as its recording, in the same order, with the same
    arguments unless ``arguments`` is false. A case without a recording is not judged."""

    arguments: bool = True
    evaluation_name: str | None = field(default=None, kw_only=True)

    def evaluate(self, run: CaseRun) -> EvaluatorResult:
        recording = run.case.recording
        if recording is None:
            return []
        recorded = recording.tool_calls
        now = [(c.name, c.arguments if self.arguments else None) for c in run.tool_calls]
        then = [(c.name, c.arguments if self.arguments else None) for c in recorded]
        if _same(now, then):
            return True
        for index, (a, b) in enumerate(zip(now, then, strict=False)):
            if not _same(a, b):
                return Evaluation(
                    self.name, False, f"call {index + 1} is {_short(a)}, recorded {_short(b)}"
                )
        return Evaluation(self.name, False, f"{len(now)} call(s), recorded {len(then)}")


# --- the budgets ------------------------------------------------------------------------------


class _AtMost(Evaluator):
    """A budget check: what the run spent (:meth:`spent`) is at most the evaluator's first
    field, the limit; :meth:`shown` writes an amount for the reason."""

    def limit(self) -> float:
        return float(getattr(self, fields(self)[0].name))  # type: ignore[arg-type]

    def spent(self, run: CaseRun) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def shown(self, amount: float) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def evaluate(self, run: CaseRun) -> EvaluatorResult:
        spent, limit = self.spent(run), self.limit()
        if spent <= limit:
            return True
        return Evaluation(self.name, False, f"{self.shown(spent)} > {self.shown(limit)}")


@dataclass
class MaxCost(_AtMost):
    """The run cost at most ``usd`` US dollars (the judge's cost not included)."""

    usd: float
    evaluation_name: str | None = field(default=None, kw_only=True)

    def spent(self, run: CaseRun) -> float:
        return run.usage.cost.total

    def shown(self, amount: float) -> str:
        return f"cost ${amount:.6f}"


@dataclass
class MaxTokens(_AtMost):
    """The run used at most ``tokens`` tokens in all (input, output and cache)."""

    tokens: int
    evaluation_name: str | None = field(default=None, kw_only=True)

    def spent(self, run: CaseRun) -> float:
        return run.usage.total_tokens

    def shown(self, amount: float) -> str:
        return f"{amount:.0f} tokens"


@dataclass
class MaxTurns(_AtMost):
    """The run made at most ``turns`` model requests."""

    turns: int
    evaluation_name: str | None = field(default=None, kw_only=True)

    def spent(self, run: CaseRun) -> float:
        return run.turns

    def shown(self, amount: float) -> str:
        return f"{amount:.0f} model requests"


@dataclass
class MaxDuration(_AtMost):
    """The run took at most ``seconds`` (the judge's time not included)."""

    seconds: float
    evaluation_name: str | None = field(default=None, kw_only=True)

    def spent(self, run: CaseRun) -> float:
        return run.duration

    def shown(self, amount: float) -> str:
        return f"{amount:.2f} s"


# --- reading them from a dataset file ---------------------------------------------------------

BUILTIN: tuple[type[Evaluator], ...] = (
    Equals,
    EqualsExpected,
    Contains,
    ToolCalled,
    ToolNotCalled,
    ToolOrder,
    MaxToolCalls,
    SameToolCalls,
    MaxCost,
    MaxTokens,
    MaxTurns,
    MaxDuration,
)
"""The evaluators a dataset file may name without registering them (with the judge: see
:func:`agentkit.evals.cases.evaluator_types`)."""


def evaluator_from_spec(spec: Any, types: Mapping[str, type[Evaluator]]) -> Evaluator:
    """The evaluator a file's ``spec`` describes (``Name``, ``{Name: arg}`` or ``{Name:
    {field: value}}``); an unknown name or bad arguments raise ``ValueError`` saying which."""
    if isinstance(spec, str):
        name, arguments = spec, None
    elif isinstance(spec, dict) and len(spec) == 1:
        name, arguments = next(iter(spec.items()))
    else:
        raise ValueError(
            f"an evaluator is a name or a one-key mapping {{Name: arguments}}, not {spec!r}"
        )
    cls = types.get(name)
    if cls is None:
        known = ", ".join(sorted(types))
        raise ValueError(
            f"unknown evaluator {name!r}; known: {known} (pass your own Evaluator classes as "
            "evaluator_types=...)"
        )
    try:
        if arguments is None:
            return cls()
        if isinstance(arguments, dict):  # always keywords (a dict value is written so too)
            return cls(**arguments)
        return cls(arguments)  # type: ignore[call-arg]
    except TypeError as exc:
        raise ValueError(f"evaluator {name}: bad arguments {arguments!r}: {exc}") from None
