"""Run configuration: YAML file, then PRB_* environment variables, validated by pydantic."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from pipeline.checks import FilterConfig
from pipeline.errors import PrbError, safe_name
from pipeline.llm.settings import BatchConfig, ModelConfig, Section
from pipeline.paths import DATA, resolve_path
from pipeline.strict import load_yaml


class ConfigError(PrbError, ValueError):
    """A config that cannot be used; the message names the file and the field."""


def _safe(value: str, what: str) -> str:
    try:
        return safe_name(value, what)
    except PrbError as e:
        raise ValueError(str(e)) from None


def _distinct(values: list[str], what: str) -> list[str]:
    if not values:
        raise ValueError(f"{what} is empty: name at least one")
    dup = sorted({v for v in values if values.count(v) > 1})
    if dup:
        raise ValueError(f"{what} lists {dup} more than once")
    return values


class PersonaConfig(Section):
    # "library"; a local JSON/JSONL/Parquet file or a folder of LaMP-QA's `{category}_{split}`
    # files; or "hf:NAME[:CONFIG]" (LaMP-QA: hf:alireza7/LaMP-QA, one config per category)
    source: str = "library"
    library: list[str] = Field(default_factory=lambda: ["personas/library"])
    questions: list[str] = Field(default_factory=lambda: ["personas/questions"])
    per_category: int | None = Field(8, ge=1)  # None: every user of each category
    # LaMP-QA layouts: which split (train/validation/test) to read; None: every split
    split: str | None = None
    questions_per_persona: int = Field(1, ge=1)
    categories: list[str] | None = None  # None: every category of the source, sorted

    @field_validator("categories")
    @classmethod
    def _categories(cls, v: list[str] | None) -> list[str] | None:
        # a category names a folder of the release: it must be one safe path component
        if v is None:
            return v
        return [_safe(c, "category") for c in _distinct(v, "personas.categories")]


class RubricsConfig(Section):
    # planner: a planner call derives the aspects; imported: the user's own published aspects
    # (LaMP-QA's rubric_aspects), no call; both: the imported ones, with the planner's beside
    # them and how many of them the planner found (the audit's agreement figure); stated: a
    # library user's own preference statements, no call (the planner for a user with none)
    source: Literal["planner", "imported", "both", "stated"] = "planner"
    # a planner aspect that names nothing of its user (pipeline/stages/rubrics.py `generic`) is
    # not used; a plan with none left is dropped as planner_generic
    refuse_generic: bool = True


class ProfileConfig(Section):
    # the k profile posts most relevant to the question go into the prompts (None: all), ranked
    # by BM25 (bm25s), or by a dense retriever when `dense_model` names a local
    # sentence-transformers model folder (never downloaded); pipeline/retrieval.py
    top_k: int | None = Field(None, ge=1)
    dense_model: str | None = None


class GenerationConfig(Section):
    word_budget: int = Field(100, ge=20)
    # None: every strategy in the `strategies:` table of the rejected prompt
    strategies: list[str] | None = None
    # the recipe's prompt files (prompts/<name>.yaml) and whether a shared content plan
    # comes first (prb) or both answers are written straight from the aspects (published)
    content_plan: bool = True
    chosen_prompt: str = "chosen"
    rejected_prompt: str = "rejected"
    # with the artifact gate on: a pair whose first rejected answer the answer-only classifier
    # picks out confidently gets a persona_swap one instead (pipeline/stages/pairs.py)
    rewrite_artifacts: bool = True
    # plan: a content plan, then chosen and rejected each from it (the strategies above);
    # rewrite: one shared base answer (prompts/base_answer.yaml) rewritten twice, for the user
    # and for a contrasting user, one concrete instruction per dimension of `dimensions` on
    # which the two differ (prompts/rewrite.yaml), each difference verified in the text;
    # by default where the user lives and what limits them (what a blind reader of real-fit saw
    # as fit), then layout; depth is left out (a brief and a thorough answer fail the length
    # check), expertise too (the 1.5B never wrote for a novice on request)
    design: Literal["plan", "rewrite"] = "plan"
    dimensions: list[str] = Field(
        default_factory=lambda: ["cultural_context", "constraints", "format"]
    )
    # at most this many of them per pair, in the order listed: a 1.5B follows one or two
    # concrete instructions and drops the rest
    dimensions_per_pair: int = Field(2, ge=1)
    # rewrite design: the two rewrites' sampling temperature (the base answer stays greedy;
    # each request carries `model.seed`, and the cache records what it wrote). Greedy, the
    # 1.5B copied the base answer unchanged into half its rewrites, so no difference showed;
    # one sample at 0.8 showed it in 13 of 18 tasks (greedy 7), but a blind reader then found
    # chosen better in general in 6 of 18 (greedy 0: bench/README.md "candidates.py"): pair it
    # with a quality judge that qualifies
    rewrite_temperature: float = Field(0.0, ge=0.0, le=2.0)

    @field_validator("chosen_prompt", "rejected_prompt")
    @classmethod
    def _prompt(cls, v: str) -> str:
        if not (DATA / "prompts" / f"{_safe(v, 'prompt name')}.yaml").is_file():
            raise ValueError(f"no prompt file prompts/{v}.yaml")
        return v

    @field_validator("strategies")
    @classmethod
    def _strategies(cls, v: list[str] | None) -> list[str] | None:
        return v if v is None else _distinct(v, "generation.strategies")

    @field_validator("dimensions")
    @classmethod
    def _dimensions(cls, v: list[str]) -> list[str]:
        import yaml

        table = yaml.safe_load((DATA / "prompts" / "rewrite.yaml").read_text(encoding="utf-8"))
        known = list(table["directions"])
        unknown = [d for d in v if d not in known]
        if unknown or not v:
            raise ValueError(
                f"{unknown or 'none given'}: a rewrite can realise only {known} "
                "(prompts/rewrite.yaml `directions`)"
            )
        return _distinct(v, "generation.dimensions")

    @model_validator(mode="after")
    def _sampled_rewrites(self) -> GenerationConfig:
        if self.rewrite_temperature and self.design != "rewrite":
            raise ValueError(
                "generation.rewrite_temperature samples the rewrite design's rewrites: set "
                "generation.design: rewrite, or leave it out"
            )
        return self


class QualificationConfig(Section):
    """Judge qualification (pipeline/qualification.py): the judge must tell sound answers from
    corrupted copies before the filters trust it."""

    enabled: bool = True
    answers: int = Field(8, ge=2)  # sound answers, four corruptions each, two orders
    min_prefers_sound: float = Field(0.75, ge=0, le=1)
    min_consistent: float = Field(0.7, ge=0, le=1)
    # also ask a position-free judge (yes/no logprobs per answer, prompts/judge_fit.yaml) on
    # the same items, recorded beside the pairwise judge's rates (an endpoint with logprobs)
    position_free: bool = False
    # build on with a judge below the thresholds, the release marked as such (--accept-weak-judge)
    accept_weak_judge: bool = False


class AnnotationConfig(Section):
    required: bool = False
    batch_size: int = Field(20, ge=1)
    annotators: int = Field(3, ge=1)
    min_labels: int = Field(2, ge=1)
    seed: int = 0
    gold_per_batch: int = Field(2, ge=0)  # known-answer items (alternating identical/off-topic)
    repeats_per_batch: int = Field(2, ge=0)  # items shown twice, A/B swapped
    min_quality: float = Field(3.0, ge=1, le=5)  # mean human score both answers must reach
    exclude_below: float | None = Field(None, ge=0, le=1)  # drop annotators under this gold acc.

    @model_validator(mode="after")
    def _reachable(self) -> AnnotationConfig:
        if self.required and self.min_labels > self.annotators:
            raise ValueError(
                f"min_labels {self.min_labels} is above annotators {self.annotators} while "
                "required is true: no pair could ever be confirmed"
            )
        return self


class ReleaseConfig(Section):
    name: str = "prb-personalized-rewardbench"
    license: str = "cc-by-4.0"


class Price(Section):
    input_per_1m: float = Field(0.0, ge=0)  # money per 1M prompt tokens
    output_per_1m: float = Field(0.0, ge=0)  # money per 1M completion tokens
    # money per 1M prompt tokens served from the provider's prompt cache; None: input_per_1m
    cached_input_per_1m: float | None = Field(None, ge=0)


class CostConfig(Section):
    """Turns the manifest's token counts into money (pipeline/cost.py)."""

    currency: str = "USD"
    batch_discount: float = Field(0.5, ge=0, le=1)  # fraction of the price that batch calls save
    prices: dict[str, Price] = Field(default_factory=dict)  # model id -> price; absent = unpriced


class RLConfig(Section):
    """`prb eval rl`: GRPO (TRL) on a copy of the policy against each reward model; every
    setting is recorded with the results. Not part of a build (execution-only there)."""

    steps: int = Field(8, ge=1)
    batch_size: int = Field(8, ge=1)  # completions per step: prompts x num_generations
    num_generations: int = Field(4, ge=2)  # completions per prompt (GRPO's group)
    learning_rate: float = Field(1e-4, gt=0)
    kl: float = Field(0.04, ge=0)  # GRPO's beta: weight of the KL penalty to the start policy
    max_new_tokens: int = Field(64, ge=4)
    temperature: float = Field(1.0, gt=0)
    held_out: float = Field(0.25, gt=0, lt=1)  # share of users whose questions grade the policy
    device: str = "cpu"  # or cuda
    seed: int = 0

    @model_validator(mode="after")
    def _groups(self) -> RLConfig:
        if self.batch_size % self.num_generations:
            raise ValueError(
                f"rl.batch_size {self.batch_size} must be a multiple of "
                f"rl.num_generations {self.num_generations}"
            )
        return self


class RunConfig(Section):
    run_id: str = "default"
    seed: int = 0
    outputs_dir: str = "outputs"
    simulated: bool = False
    # a named recipe: configs/recipes/<recipe>.yaml, the settings this config starts from
    recipe: str = "prb"
    model: ModelConfig = Field(default_factory=ModelConfig)
    personas: PersonaConfig = Field(default_factory=PersonaConfig)
    profile: ProfileConfig = Field(default_factory=ProfileConfig)
    rubrics: RubricsConfig = Field(default_factory=RubricsConfig)
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    filters: FilterConfig = Field(default_factory=FilterConfig)
    qualification: QualificationConfig = Field(default_factory=QualificationConfig)
    annotation: AnnotationConfig = Field(default_factory=AnnotationConfig)
    release: ReleaseConfig = Field(default_factory=ReleaseConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    cost: CostConfig = Field(default_factory=CostConfig)
    rl: RLConfig = Field(default_factory=RLConfig)

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, v: str) -> str:
        # the run id names a folder under outputs_dir: never a path of its own
        return _safe(v, "run id")

    @model_validator(mode="after")
    def _sources_agree(self) -> RunConfig:
        if self.rubrics.source in ("imported", "both") and self.personas.source == "library":
            raise ValueError(
                f"rubrics.source {self.rubrics.source!r} uses the users' own published aspects, "
                "and library personas have none: import users (personas.source), or use planner"
            )
        return self

    @property
    def run_dir(self) -> Path:
        return resolve_path(self.outputs_dir) / self.run_id

    @property
    def cache_path(self) -> Path:
        """One response cache for all runs under outputs_dir: a new run id reuses old calls."""
        return resolve_path(self.outputs_dir) / "cache.sqlite"

    def recorded(self) -> dict:
        """The config as manifests record it: no API key, nothing execution-only, so a
        `--debug` rebuild or a new simulator port gives the same bytes. `filters.evaluate_all:
        true` (every check on every pair) is how every release was built before the setting
        existed: it is left out so those manifests stay byte-identical; false is recorded."""
        data = _without(self.model_dump(mode="json"), EXECUTION_ONLY)
        if data["filters"].get("evaluate_all"):
            del data["filters"]["evaluate_all"]
        if data["generation"]["design"] == "plan":  # likewise: releases before the rewrite
            for key in ("design", "dimensions", "dimensions_per_pair"):
                del data["generation"][key]
        if not data["generation"]["rewrite_temperature"]:  # and greedy rewrites, as before it
            del data["generation"]["rewrite_temperature"]
        return data

    def resume_inputs(self) -> dict:
        """What a run's stage files depend on: a resumed run must match these exactly."""
        return _without(self.recorded(), RECOMPUTED)


# Settings that change how a build runs, never what it produces (dotted paths).
EXECUTION_ONLY = (
    "run_id",
    "outputs_dir",
    "batch",
    "model.api_key",
    "model.base_url",
    "model.concurrency",
    "model.max_retries",
    "model.timeout_s",
    "model.backoff_initial_s",
    "model.backoff_max_s",
    "model.requests_per_minute",
    "model.tokens_per_minute",
    "model.rate_limits_from_headers",
    # a local model is recorded by its id and weights hash
    "model.local",
    "model.local_threads",
    "model.local_batch_threads",
    "model.local_slots",
    "model.replay",
    "model.context_window",  # the build's judges cut nothing: an overlong prompt fails either way
    "rl",
    "qualification.accept_weak_judge",  # the rates are recorded either way
)
# Sections whose stages are recomputed on every build (verdicts from imported labels, release
# files, prices): changing them between a run and its resumption mixes nothing.
RECOMPUTED = ("annotation", "release", "cost")


def _without(data: dict, paths: tuple[str, ...]) -> dict:
    data = json.loads(json.dumps(data))
    for path in paths:
        *parents, leaf = path.split(".")
        node = data
        for part in parents:
            node = node.get(part, {})
        node.pop(leaf, None)
    return data


ENV_OVERRIDES = {
    "PRB_BASE_URL": ("model", "base_url"),
    "PRB_API_KEY": ("model", "api_key"),
    "PRB_GENERATOR_MODEL": ("model", "generator"),
    "PRB_JUDGE_MODEL": ("model", "judge"),
}


RECIPES_DIR = DATA / "configs" / "recipes"


def recipes() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def _merged(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def with_recipe(data: dict, where: object) -> dict:
    """The config over its recipe's settings (the config wins, key by key)."""
    name = data.get("recipe", "prb")
    if not isinstance(name, str) or name not in recipes():
        raise ConfigError(
            f"{where}: invalid config: recipe: unknown recipe {name!r} (one of {recipes()})"
        )
    recipe = yaml.safe_load((RECIPES_DIR / f"{name}.yaml").read_text(encoding="utf-8")) or {}
    return _merged(recipe, data)


MAX_CONFIG_BYTES = 1 << 20  # a run config is a page of settings, never data
MAX_CONFIG_STRING = 4096  # a path, a URL or a name: a 50 MB value would fill the card


def _long_strings(data: object, at: str = "") -> list[str]:
    if isinstance(data, str):
        return [at or "<top>"] if len(data) > MAX_CONFIG_STRING else []
    if isinstance(data, dict):
        return [x for k, v in data.items() for x in _long_strings(v, f"{at}.{k}".lstrip("."))]
    if isinstance(data, list):
        return [x for i, v in enumerate(data) for x in _long_strings(v, f"{at}[{i}]")]
    return []


def load_config(path: str | Path | None = None, **overrides: object) -> RunConfig:
    data: dict = {}
    if path is not None:
        path = Path(path)
        try:
            if path.stat().st_size > MAX_CONFIG_BYTES:
                raise ConfigError(
                    f"{path}: {path.stat().st_size:,} bytes is not a run config (at most "
                    f"{MAX_CONFIG_BYTES:,}): settings only, data goes in files it names"
                )
            data = load_yaml(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: cannot read config: {e}") from e
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark else ""
            what = getattr(e, "problem", None) or " ".join(str(e).split())
            raise ConfigError(f"{path}: malformed YAML{at}: {what}") from e
        if long := _long_strings(data):
            raise ConfigError(
                f"{path}: {', '.join(long[:3])}: a value over {MAX_CONFIG_STRING:,} characters "
                "is not a setting (a path, a URL or a name)"
            )
        if data is None:
            raise ConfigError(
                f"{path}: the config file is empty: a run config is a YAML mapping "
                "(start from configs/default.yaml)"
            )
        if not isinstance(data, dict):
            raise ConfigError(
                f"{path}: the top level must be a mapping, not a {type(data).__name__}"
            )

    def section(node: dict, name: str, at: str = "") -> dict:
        """The mapping `name` of `node`, made if absent: `model:` left empty or `model: 5`
        is refused here, before an option or variable is written into it."""
        if node.get(name) is None:
            node[name] = {}
        if not isinstance(node[name], dict):
            raise ConfigError(
                f"{path or '<defaults>'}: invalid config: {at}{name}: a section of settings "
                f"(a mapping), not a {type(node[name]).__name__}"
            )
        return node[name]

    for env, (name, key) in ENV_OVERRIDES.items():
        if os.environ.get(env):
            section(data, name)[key] = os.environ[env]
    key_file = os.environ.get("PRB_API_KEY_FILE")
    if key_file:
        try:
            key = Path(key_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(
                f"PRB_API_KEY_FILE={key_file}: cannot read the API key: {e.__class__.__name__}"
            ) from None
        if not key:
            raise ConfigError(f"PRB_API_KEY_FILE={key_file}: the file is empty")
        section(data, "model")["api_key"] = key
    for dotted, value in overrides.items():
        if value is None:
            continue
        *parents, leaf = dotted.split("__")
        node = data
        for i, part in enumerate(parents):
            node = section(node, part, "".join(f"{p}." for p in parents[:i]))
        node[leaf] = value
    data = with_recipe(data, path or "<defaults>")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<top>'}: "
            f"{err['msg'].removeprefix('Value error, ')}"
            for err in e.errors()
        )
        raise ConfigError(f"{path or '<defaults>'}: invalid config: {problems}") from None
