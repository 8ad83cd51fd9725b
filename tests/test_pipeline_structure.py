"""The Pipeline's parts take their collaborators through their constructors (issue #39 item 4).

``kipconsumer/_pipeline/`` (the guarantees, their tasks, the transaction) gets one
``PipelineContext`` from the pipeline and never reaches back into it: a static check (AST) that no
module there reads or writes another object's private attribute or holds the ``Pipeline``, and that
the producer slot has one writer (``PipelineContext.replace_producer``). Then a unit test of that
writer on the embedded broker: a ``Transaction`` follows the slot instead of keeping a producer.
"""

from __future__ import annotations

import ast
import uuid
from pathlib import Path
from types import MappingProxyType

import pytest

from kipconsumer import KafkaConsumer, KafkaProducer
from kipconsumer._pipeline.budget import CallBudget
from kipconsumer._pipeline.context import FlowControl, PipelineContext
from kipconsumer._pipeline.task import PartitionTask
from kipconsumer._pipeline.transaction import Transaction
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import KafkaError
from kipconsumer.structs import TopicPartition

PKG = Path(__file__).resolve().parent.parent / "kipconsumer"
PARTS = sorted((PKG / "_pipeline").glob("*.py"))
OWNER = PKG / "streams.py"
# where the producer slot may be written: (class, method)
SLOT_WRITERS = {("PipelineContext", "__init__"), ("PipelineContext", "replace_producer")}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def foreign_private_attributes(source: str) -> list[str]:
    """``line: expression`` of every private attribute (``x._name``) read or written on anything but
    ``self``/``cls``: another object's internals (``self._p._tasks``, ``pipeline._producer``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def pipeline_references(source: str) -> list[str]:
    """``line: what`` of every import of ``kipconsumer.streams`` and every use of the name ``Pipeline``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "kipconsumer.streams":
            found.append(f"{node.lineno}: from kipconsumer.streams import ...")
        elif isinstance(node, ast.Import) and any(a.name == "kipconsumer.streams" for a in node.names):
            found.append(f"{node.lineno}: import kipconsumer.streams")
        elif isinstance(node, ast.Name) and node.id == "Pipeline":
            found.append(f"{node.lineno}: Pipeline")
    return found


def producer_writes(source: str) -> list[tuple[str, str, str]]:
    """(class, function, ``line: target``) of every assignment to an attribute that names a producer
    (``x.producer``, ``self._producer``, ``self._new_producer``; not ``producer_config`` or the
    ``producer_replacements`` counter)."""
    found = []

    def visit(node: ast.AST, cls: str, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name, "")
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, cls, child.name)
                continue
            targets: list[ast.expr] = []
            if isinstance(child, ast.Assign):
                targets = child.targets
            elif isinstance(child, (ast.AnnAssign, ast.AugAssign)):
                targets = [child.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr.lstrip("_").split("_")[-1] == "producer":
                    found.append((cls, func, f"{t.lineno}: {ast.unparse(t)}"))
            visit(child, cls, func)

    visit(ast.parse(source), "", "")
    return found


def test_the_parts_are_where_the_design_map_says() -> None:
    names = {p.name for p in PARTS}
    assert {"context.py", "budget.py", "task.py", "at_least_once.py", "exactly_once.py",
            "transaction.py"} <= names, names
    # exactly-once lives in the package only (no second module beside it, as _eos.py was)
    assert not [p.name for p in PKG.glob("*.py") if "eos" in p.name or "once" in p.name]


@pytest.mark.parametrize("path", PARTS, ids=lambda p: p.name)
def test_no_part_reads_or_writes_another_objects_private_attributes(path: Path) -> None:
    found = foreign_private_attributes(path.read_text())
    assert not found, f"{path.name} reaches into another object (take it through PipelineContext): {found}"


@pytest.mark.parametrize("path", PARTS, ids=lambda p: p.name)
def test_no_part_holds_the_pipeline(path: Path) -> None:
    found = pipeline_references(path.read_text())
    assert not found, f"{path.name} refers to the Pipeline (its collaborators come in the context): {found}"


def test_the_producer_slot_has_one_writer() -> None:
    writes = {path.name: producer_writes(path.read_text()) for path in [*PARTS, OWNER]}
    everywhere = [(name, *w) for name, ws in writes.items() for w in ws]
    assert {(cls, func) for _, cls, func, _ in everywhere} == SLOT_WRITERS, everywhere
    assert {name for name, *_ in everywhere} == {"context.py"}, everywhere


def test_the_checks_catch_the_old_shape() -> None:
    """The checks above flag what the split modules did before the context existed."""
    old = '''
from kipconsumer.streams import Pipeline

class ExactlyOnce:
    def __init__(self, pipeline: Pipeline) -> None:
        self._p = pipeline
        self._new_producer = None

    def _replace_producer(self):
        p = self._p
        p._producer = KafkaProducer(p.config.producer)
        return self._p._tasks
'''
    assert foreign_private_attributes(old) == ["11: p._producer", "12: self._p._tasks"]
    assert [w.split(": ")[1] for w in pipeline_references(old)] == ["from kipconsumer.streams import ...",
                                                                    "Pipeline"]
    assert [(c, f) for c, f, _ in producer_writes(old)] == [("ExactlyOnce", "__init__"),
                                                          ("ExactlyOnce", "_replace_producer")]


# ---- the slot's writer, on the embedded broker ------------------------------------------------------------

class _Task(PartitionTask):
    __slots__ = ("txn_base",)

    def __init__(self, ctx: PipelineContext, tp: TopicPartition) -> None:
        super().__init__(ctx, tp)
        self.txn_base = -1

    def rewind(self) -> None:
        self.txn_base = -1

    def rewind_to(self, offset: int) -> None:
        self.txn_base = -1


def _context(broker: EmbeddedBroker, consumer: KafkaConsumer) -> PipelineContext:
    conf: dict[str, object] = {"bootstrap.servers": broker.bootstrap_servers,
                               "transactional.id": f"slot-{uuid.uuid4().hex[:8]}"}
    budget = CallBudget(max_poll_interval_ms=20_000, default_api_timeout_ms=10_000, retry_backoff_ms=100)
    return PipelineContext(
        producer=KafkaProducer(conf), producer_config=conf, consumer=consumer, process=lambda rec: [],
        sink_topic="sink", sink_partitioning="key", flow=FlowControl(consumer, 10, 40), budget=budget,
        tasks=MappingProxyType({}), commit_interval_s=1.0, task_timeout_ms=10_000,
        transaction_timeout_s=60.0)


def test_replace_producer_is_the_slots_one_writer_and_the_transaction_follows_it(
        broker: EmbeddedBroker) -> None:
    consumer = KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers,
                              "group.id": f"slot-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    ctx = _context(broker, consumer)
    try:
        with pytest.raises(AttributeError):
            ctx.producer = ctx.producer  # type: ignore[misc]  # read-only: replace_producer() writes it
        first = ctx.producer
        first.init_transactions(timeout=10)
        txn = Transaction(ctx)
        txn.begin_if_needed()
        assert txn.open

        # the transaction's own replacement path (a fencing after transaction.timeout.ms) goes through
        # the slot: the old producer is closed, the new one initialized, nothing else holds the old one
        err = txn.fenced_by_timeout([], KafkaError("fenced by the test", code="PRODUCER_FENCED"))
        assert err.code == "_TXN_TIMED_OUT"
        second = ctx.producer
        assert second is not first and first.closed and not second.closed
        assert ctx.producer_replacements == 1 and not txn.busy and not txn.open
        txn.begin_if_needed()  # on the new producer (the old one is closed: it would raise)
        assert txn.open
        txn.abort([], "test")
        assert txn.aborts == 2 and not txn.busy

        # a replacement made by the context alone: the transaction uses the new producer at once
        third = ctx.replace_producer()
        assert ctx.producer is third and second.closed and ctx.producer_replacements == 2
        third.init_transactions(timeout=10)
        txn.begin_if_needed()
        assert txn.open
        third.abort_transaction(timeout=10)  # the transaction was begun on ``third``
    finally:
        ctx.producer.close(0)
        consumer.close()
