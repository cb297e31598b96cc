"""Hostile jq in untrusted definitions: the evaluator always answers, and survives.

Expressions that grow memory (doubling ``reduce``, string repetition by a computed or a
literal count), burn CPU (reduce over a cross product) or return a lot, at random sizes,
in a definition loaded like a ``--definitions`` file. Outcome only: a resolution, a
DefinitionError at load, or an EvaluationError (``BoundExceeded`` naming the
bound); never a crash of the calling process, and a built-in kind still resolves after.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.workloads.bounded import BoundExceeded, Bounds, Evaluator
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.errors import DefinitionError, EvaluationError
from tests.unit.workloads.shapes import BATCHSET, BATCHSET_OBJ, edit

BOUNDS = Bounds(deadline_seconds=20, cpu_seconds=2, memory_mb=256, workers=1)
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
       "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}


def _doubling(n: int, seed: str) -> str:
    return f"reduce ({', '.join(['.spec'] * n)}) as $x ({seed}; . + .) | length"


hostile = st.one_of(
    st.builds(_doubling, st.integers(1, 40), st.sampled_from(["[1]", '"x"', "[.spec]"])),
    st.builds(lambda n: f'("x" * {n}) | length', st.integers(0, 10**10)),
    st.builds(lambda n: f'("ab" * ((.spec.jobs | length) * {n})) | length',
              st.integers(0, 10**9)),
    st.builds(lambda k: "reduce (" + " | ".join(
        f"(1,2,3,4,5,6,7,8,9,10) as $v{i}" for i in range(k)) + " | 1) as $x (0; . + 1)",
        st.integers(1, 9)),
    st.builds(lambda n: f"[.spec.jobs[] | tostring * {n}] | length", st.integers(1, 10**6)),
)


def _with_replicas(path: str) -> str:
    def change(doc: dict[str, object]) -> None:
        child = doc["spec"]["structureDefinition"]["childComponents"][0]  # type: ignore[index]
        child["scaleDefinition"]["replicasPath"] = path
    return edit(BATCHSET, change)


@settings(max_examples=12, deadline=None)
@given(hostile)
def test_hostile_expression_ends_with_an_answer_or_a_named_bound(expression: str) -> None:
    try:
        definitions = load_text(_with_replicas(expression), source="hostile.yaml")
    except DefinitionError:
        return  # refused at load (literal repetition, ...)
    catalog = Catalog.merged(Catalog.builtin(), Catalog(definitions))
    with Evaluator.for_catalog(catalog, bounds=BOUNDS) as evaluator:
        try:
            evaluator.resolve(BATCHSET_OBJ)
        except BoundExceeded as error:
            assert error.bound in ("time", "cpu", "memory", "result size", "worker")
        except EvaluationError:
            pass  # a jq error or a wrong shape: the definition is broken, said so
        assert evaluator.resolve(JOB).demand.pods == 1  # the caller is alive and well
