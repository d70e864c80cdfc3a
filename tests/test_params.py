"""The params format from Python: dicts, JSON, attributes, errors."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from hypothesis import given, settings

import tilefuse as tf
from conftest import from_schema

# Seed 000's example, as a user would type it.
SEED_000 = {
    "tile_sizes": {
        "cta_tile": {"m": 128, "n": 128, "k": 32},
        "warp_tile": {"m": 64, "n": 64, "k": 32},
        "instruction_tile": {"m": 16, "n": 8, "k": 16},
    },
    "async_gmem_load_operands": False,
}


def test_seed_000_flow(tmp_path: Any) -> None:
    p = tf.MatmulParams.from_dict(SEED_000)
    assert isinstance(p, tf.MatmulParams) and isinstance(p, tf.HeuristicParams)
    p.tile_sizes.warp_tile.n = 32
    assert p.tile_sizes.warp_tile.n == 32
    assert p.to_dict()["tile_sizes"]["warp_tile"] == {"m": 64, "n": 32, "k": 32}
    path = tmp_path / "params.json"
    path.write_text(p.to_json())
    back = tf.HeuristicParams.from_json(path.read_text())
    assert back == p and type(back) is tf.MatmulParams


def test_partial_nested_construction_keeps_contextual_defaults() -> None:
    p = tf.MatmulParams(tile_sizes={"cta_tile": {"m": 64}})
    default = tf.MatmulParams()
    assert p.tile_sizes.cta_tile == tf.GemmTile(m=64, n=128, k=32)
    assert p.tile_sizes.warp_tile == default.tile_sizes.warp_tile
    assert p.splitk_factor == 1
    # keyword values override the positional dict; params objects nest.
    q = tf.MatmulParams(SEED_000, splitk_factor=4, tile_sizes=p.tile_sizes)
    assert (q.splitk_factor, q.tile_sizes.cta_tile.m) == (4, 64)


def test_views_write_through_and_copies_do_not() -> None:
    p = tf.MatmulParams()
    cta = p.tile_sizes.cta_tile
    cta.m = 64
    assert p.tile_sizes.cta_tile.m == 64
    c = p.copy()
    c.tile_sizes.cta_tile.n = 64
    assert (c.tile_sizes.cta_tile.n, p.tile_sizes.cta_tile.n) == (64, 128)
    detached = copy.deepcopy(cta)
    detached.m = 256
    assert p.tile_sizes.cta_tile.m == 64
    p.launch = tf.LaunchParams(workgroup_size=[64, 2, 1])
    assert p.launch.workgroup_size == (64, 2, 1)
    p.launch.grid = [4, 4, 1]
    assert p.to_dict()["launch"] == {"workgroup_size": [64, 2, 1], "grid": [4, 4, 1]}


def test_rejected_write_leaves_the_value_unchanged() -> None:
    p = tf.MatmulParams()
    before = p.to_dict()
    with pytest.raises(tf.ParamsError) as info:
        p.tile_sizes.warp_tile.m = 48
    assert info.value.path == "tile_sizes.warp_tile.m"
    assert info.value.message == "48 does not divide cta_tile.m (128)"
    assert str(info.value).startswith("tile_sizes.warp_tile.m: 48 does not divide cta_tile.m")
    assert "use replace()" in str(info.value)
    assert p.to_dict() == before


def test_replace_changes_fields_that_constrain_each_other_at_once() -> None:
    """One at a time, the first write is refused: 48 does not divide the
    cta tile's 128 rows until those are 96."""
    p = tf.MatmulParams()
    q = p.replace(tile_sizes={"cta_tile": {"m": 96}, "warp_tile": {"m": 48}})
    assert (q.tile_sizes.cta_tile.m, q.tile_sizes.warp_tile.m) == (96, 48)
    assert (p.tile_sizes.cta_tile.m, p.tile_sizes.warp_tile.m) == (128, 64)
    assert q.tile_sizes.cta_tile.replace(n=32).to_dict() == {"m": 96, "n": 32, "k": 32}
    with pytest.raises(tf.ParamsError, match=r"warp_tile\.m: 48 does not divide"):
        p.replace(tile_sizes={"warp_tile": {"m": 48}})


@pytest.mark.parametrize(
    ("values", "path", "message"),
    [
        (
            {"tile_sizes": {"cta_tile": {"m": "64"}}},
            "tile_sizes.cta_tile.m",
            'expected a positive integer, got "64"',
        ),
        (
            {"tile_sizes": {"cta_tile": {"m": -64}}},
            "tile_sizes.cta_tile.m",
            "expected a positive integer, got -64",
        ),
        (
            {"tile_sizes": {"cta_tile": {"m": 64.0}}},
            "tile_sizes.cta_tile.m",
            "expected a positive integer, got 64.0",
        ),
        (
            {"tile_sizes": {"cta_tile": {"q": 1}}},
            "tile_sizes.cta_tile.q",
            "unknown field; expected one of m, n, k",
        ),
        ({"tile_sizes": {"cta_tile": 5}}, "tile_sizes.cta_tile", "expected an object, got 5"),
        (
            {"circular_buffer_options": {"stages": 2, "prefetch_gap": 2}},
            "circular_buffer_options.prefetch_gap",
            "must be less than stages (2), got 2",
        ),
        (
            {"supported_vec_size": {"a": 3}},
            "supported_vec_size.a",
            "expected one of 1, 2, 4, got 3",
        ),
        (
            {"launch": {"workgroup_size": [64, 1]}},
            "launch.workgroup_size",
            "expected a list of 3 items or null, got 2 items",
        ),
        (
            {"launch": {"workgroup_size": [64, 32, 1]}},
            "launch.workgroup_size",
            "2048 invocations exceed the maximum of 1024",
        ),
        (
            {"cta_order": "diagonal"},
            "cta_order",
            'expected one of "row_major", "column_major", got "diagonal"',
        ),
        (
            {"scheduler": "reduction"},
            "scheduler",
            'expected "matmul" for MatmulParams, got "reduction"',
        ),
        ({"version": 99}, "version", "99 is newer than this tilefuse reads (1)"),
        ({"splitk_factor": float("nan")}, "splitk_factor", "expected an integer from 1 to 64"),
        ({"bogus": True}, "bogus", "unknown field"),
    ],
)
def test_errors_carry_the_field_path(values: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(tf.ParamsError) as info:
        tf.MatmulParams.from_dict(values)
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, tf.TilefuseError)
    assert err.path == path
    assert message in err.message, err.message
    assert str(err) == f"{path}: {err.message}"


def test_union_dispatch_and_its_errors() -> None:
    assert type(tf.HeuristicParams.from_dict({"scheduler": "pointwise"})) is tf.PointwiseParams
    for bad, message in [
        ({"scheduler": "conv"}, 'scheduler: expected one of "pointwise", "reduction", "matmul"'),
        ({}, "scheduler: missing"),
        ({"scheduler": 3}, "scheduler: expected one of"),
    ]:
        with pytest.raises(tf.ParamsError, match=message):
            tf.HeuristicParams.from_dict(bad)
    with pytest.raises(tf.ParamsError, match="invalid JSON: EOF while parsing"):
        tf.HeuristicParams.from_json('{"scheduler": "matmul", "tile_sizes": {')
    with pytest.raises(
        tf.ParamsError, match=r"subgroup_inner_reduction: needs compile\.use_subgroups"
    ):
        tf.ReductionParams(subgroup_inner_reduction=True)
    with pytest.raises(TypeError, match="cannot convert object to JSON"):
        tf.PointwiseParams(break_point=object())


def test_old_values_still_load() -> None:
    # A dict written before most fields existed: version 1, two fields.
    p = tf.HeuristicParams.from_dict(
        {"scheduler": "pointwise", "version": 1, "vectorization_factor": 4}
    )
    assert isinstance(p, tf.PointwiseParams)
    assert (p.vectorization_factor, p.unroll_factor_inner, p.version) == (4, 1, 1)


def test_value_semantics() -> None:
    a, b = tf.MatmulParams(), tf.MatmulParams()
    assert a == b and hash(a) == hash(b)
    b.launch.workgroup_size = [64, 1, 1]
    assert a != b and hash(a) != hash(b)
    assert len({a, b, tf.MatmulParams()}) == 2
    assert tf.PointwiseParams() != tf.ReductionParams()
    assert pickle.loads(pickle.dumps(b)) == b
    assert copy.copy(b) == b and copy.copy(b) is not b
    r = repr(tf.GemmTile(m=1, n=2, k=3))
    assert r == "GemmTile(m=1, n=2, k=3)"
    assert "tile_sizes=MatMulTileOptions(cta_tile=GemmTile(m=128" in repr(a)
    with pytest.raises(AttributeError, match="has no field 'nope'"):
        _ = a.nope  # type: ignore[attr-defined]


def test_diff_names_each_changed_field_by_its_path() -> None:
    a, b = tf.MatmulParams(), tf.MatmulParams()
    assert a.diff(b) == {}
    b.launch.workgroup_size = [64, 1, 1]
    b.tile_sizes.cta_tile.m = 64
    assert a.diff(b) == {
        "launch.workgroup_size": (a.to_dict()["launch"]["workgroup_size"], [64, 1, 1]),
        "tile_sizes.cta_tile.m": (128, 64),
    }
    assert b.tile_sizes.diff(a.tile_sizes) == {"cta_tile.m": (64, 128)}
    with pytest.raises(TypeError, match="MatmulParams and PointwiseParams have different fields"):
        a.diff(tf.PointwiseParams())


def test_json_schema_documents_every_field() -> None:
    schema = tf.MatmulParams.json_schema()
    assert schema["additionalProperties"] is False
    tile = schema["$defs"]["GemmTile"]["properties"]["m"]
    assert tile["minimum"] == 1 and tile["description"]
    assert schema["properties"]["splitk_factor"]["default"] == 1
    for cls in (tf.PointwiseParams, tf.ReductionParams, tf.MatmulParams):
        assert set(cls.fields()) == set(cls.json_schema()["properties"])
        assert cls.__doc__


# --- property: any valid value survives dict → JSON → params ---------------


@pytest.mark.parametrize("cls", [tf.PointwiseParams, tf.ReductionParams, tf.MatmulParams])
def test_any_valid_value_round_trips(cls: type[tf.HeuristicParams]) -> None:
    schema = cls.json_schema()
    accepted = 0

    @settings(max_examples=150, deadline=None)
    @given(from_schema(schema, schema))
    def check(values: dict[str, Any]) -> None:
        nonlocal accepted
        values["version"] = tf.PARAMS_VERSION
        try:
            p = cls.from_dict(values)
        except tf.ParamsError as err:
            assert err.path, f"rejection without a path: {err}"
            return
        accepted += 1
        d = p.to_dict()
        assert d["scheduler"] == cls.scheduler
        assert tf.HeuristicParams.from_json(json.dumps(d)) == p
        assert cls.from_dict(d) == p and cls.from_json(p.to_json()) == p
        # Set every leaf again by attribute: the value must not change.
        q = p.copy()
        for field in cls.fields():
            if isinstance(getattr(q, field), tf.ParamsStruct):
                continue
            setattr(q, field, getattr(p, field))
        assert q == p

    check()
    assert accepted > 20, f"only {accepted} draws were valid; the strategy is too loose"
