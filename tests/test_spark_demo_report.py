"""What the main job (``python -m kipconsumer.spark_demo``) prints as its steady rate: rows /
triggerExecution of the micro-batches after each run's first (no Spark needed)."""

from __future__ import annotations

from typing import Any

from kipconsumer.spark_demo import steady_state


def _p(rows: int, total_ms: int, add_ms: int = 0, wal_ms: int = 0) -> dict[str, Any]:
    return {"numInputRows": rows,
            "durationMs": {"triggerExecution": total_ms, "addBatch": add_ms, "walCommit": wal_ms}}


def test_steady_state_leaves_out_each_runs_first_micro_batch() -> None:
    runs = [[_p(60_000, 9_000), _p(60_000, 1_500, 1_200, 200), _p(0, 50)],
            [_p(60_000, 5_000), _p(20_000, 1_000, 800, 150)]]
    steady, lines = steady_state(runs, 60_000, "AvailableNow")
    assert steady == 80_000 / 2.5
    text = "\n".join(lines)
    assert "2 micro-batch(es) after each run's first" in text and "maxOffsetsPerTrigger 60,000" in text
    assert "60,000, 20,000 rows" in text and "20,000..40,000" in text
    assert "1.25 s: 1.00 s in addBatch" in text and "0.17 s planning + offset log + commit" in text
    # 1.5 s for 60k rows, 1.0 s for 20k: 0.75 s fixed + 12.5 us per row
    assert "0.75 s per micro-batch + 12.5 us per row" in text and "at most 40,000 rows/s" in text


def test_steady_state_without_a_second_micro_batch() -> None:
    steady, lines = steady_state([[_p(5, 900)]], 60_000, "AvailableNow")
    assert steady == 0.0 and "no micro-batch after" in lines[0]


def test_the_jvm_connector_source_needs_real_kafka(capsys: Any) -> None:
    """``--source kafka`` (Spark's own connector, for comparison) is refused on the embedded broker,
    before anything starts, saying why."""
    import pytest

    from kipconsumer.spark_demo import main

    with pytest.raises(SystemExit) as e:
        main(["--source", "kafka"])
    assert e.value.code == 2
    assert "--source kafka needs --kafka" in capsys.readouterr().err
