"""The reward-model kinds `prb eval --rm` knows, in one table: a `--rm` spec's kind names an
adapter, which parses its own options. Heavy adapters (torch) are imported only when used.

    KIND[:ARG][,key=value...]   e.g. judge:context=none, judge-pair:model=gpt-4o,
                                hf:./my-rm,device=cuda,batch_size=16, random:seed=3

To add a reward model: an adapter class (a `RewardModel`; if it takes options, its own
`from_spec`), its line in REWARD_MODELS, and a test; or, from another package, a `Kind` named by
an entry point of the group `prb.reward_models` (no prb file changed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.registry import Registry, resolve


@dataclass(frozen=True)
class Kind:
    name: str
    help: str  # one line for `prb eval --help`
    adapter: str  # "module:Class", imported when a spec names this kind
    extra: str | None = None  # the optional dependencies it needs (pyproject's extras)
    # the key=value options its adapter reads besides `context` (None: not declared, any);
    # another is refused, never ignored (`judge:modle=x` scored with the config's judge)
    options: tuple[str, ...] | None = None


HF_OPTIONS = (
    "path",
    "dtype",
    "device",
    "device_map",
    "batch_size",
    "max_length",
    "max_batch_tokens",
    "arch",
)


REWARD_MODELS: Registry[Kind] = Registry(
    "reward_models",
    Kind,
    named=True,
    builtin={
        k.name: k
        for k in (
            Kind(
                "random",
                "seeded random score (option seed=N)",
                "pipeline.eval.rewards:RandomRM",
                options=("seed",),
            ),
            Kind("length", "longer answer wins", "pipeline.eval.rewards:LengthRM", options=()),
            Kind(
                "overlap",
                "lexical overlap between the user context and the answer",
                "pipeline.eval.rewards:OverlapRM",
                options=(),
            ),
            Kind(
                "judge",
                "LLM judge, pointwise 1-10 (option model=NAME; default the config's judge)",
                "pipeline.eval.rewards:JudgeRM",
                options=("model", "context_window"),
            ),
            Kind(
                "judge-pair",
                "LLM judge, pairwise, both A/B orders (option model=NAME)",
                "pipeline.eval.rewards:PairwiseJudgeRM",
                options=("model", "context_window"),
            ),
            Kind(
                "hf",
                "Hugging Face reward model: hf:PATH_OR_ID (options dtype=auto|bf16|fp16|fp32, "
                "device, device_map, batch_size, max_batch_tokens, arch=sequence-classifier|"
                "value-head; the `hf` extra)",
                "pipeline.eval.hf:HFRewardModel",
                extra="hf",
                options=HF_OPTIONS,
            ),
            Kind(
                "hf-pair",
                "Hugging Face pairwise ranker: hf-pair:PATH_OR_ID, both A/B orders (the "
                "same options; the `hf` extra)",
                "pipeline.eval.hf:HFPairRanker",
                extra="hf",
                options=HF_OPTIONS,
            ),
        )
    },
)


def help_text() -> str:
    return "; ".join(f"{k.name}: {k.help}" for k in REWARD_MODELS)


def parse_spec(
    spec: str,
    *,
    llm,
    judge_model: str,
    context: str,
    protocol: str = "prb",
    public_prompts: str | None = None,
):
    """The adapter (a RewardModel) a `--rm` spec names, built with its options, under the named
    scoring protocol (pipeline/eval/protocol.py)."""
    # KIND:ARG,... or KIND,key=value,... (no ARG): the kind ends at the first ':' or ','
    kind, rest = re.match(r"([^:,]*)[:,]?(.*)", spec, re.DOTALL).groups()
    from pipeline.eval.rewards import CONTEXT_MODES, SpecEnv, SpecError

    found = REWARD_MODELS.get(kind) if kind in REWARD_MODELS else None
    if found is None:
        known = ", ".join(REWARD_MODELS.names())
        raise SpecError(f"--rm {spec!r}: unknown kind {kind!r}; known: {known}")
    options: dict[str, str] = {}
    positional = []
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if eq:
            options[key.strip()] = value.strip()
        else:
            positional.append(part.strip())
    if found.options is not None:
        unknown = sorted(set(options) - {"context", *found.options})
        if unknown:
            takes = ", ".join(("context", *found.options))
            raise SpecError(f"--rm {spec!r}: unknown option {unknown[0]!r}; {kind} takes: {takes}")
    if options.get("context", context) not in CONTEXT_MODES:
        raise SpecError(f"--rm {spec!r}: context must be one of {', '.join(CONTEXT_MODES)}")
    if protocol == "published" and options.get("context", "none") != "none":
        raise SpecError(
            f"--rm {spec!r}: the published protocol gives the model the question "
            "only; drop context= or use --protocol prb"
        )
    env = SpecEnv(llm, judge_model, context, protocol, public_prompts)
    try:
        return resolve(found.adapter).from_spec(kind, options, positional, env)
    except ImportError as e:
        extra = found.extra or "all"
        missing = f"{e.name} is not installed" if e.name else "a dependency is missing"
        raise SpecError(
            f"--rm {spec!r}: {missing} (the `{extra}` extra): pip install '.[{extra}]'"
        ) from None
    except SpecError as e:
        raise SpecError(f"--rm {spec!r}: {str(e).removeprefix(f'--rm {kind}: ')}") from None
    except ValueError as e:
        raise SpecError(f"--rm {spec!r}: {e}") from None
