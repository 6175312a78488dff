"""The options table (include/dummy_collectives/options_table.def): every option declared once,
and everything about it derived from that entry — the README's table, the Options attributes and
keywords, the environment reading, the validation (one rule, one message, however the value came),
and the settings every rank of a group must agree on. In this process: no group is made."""

from __future__ import annotations

from typing import Any

import pytest

dummy_collectives = pytest.importorskip("dummy_collectives")

from dummy_collectives import _C, _registration, options_doc  # noqa: E402

ROWS: list[dict[str, Any]] = list(_C._options_table())
NUMERIC = [row for row in ROWS if row["rule"] in ("at_least", "between", "auto_or_at_least")]
CHOICE = [row for row in ROWS if row["rule"] == "one_of"]


def row_id(row: dict[str, Any]) -> str:
    return str(row["name"])


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Options() reads every option's variable: none may leak in from the caller."""
    for row in ROWS:
        monkeypatch.delenv(row["env"], raising=False)


def python_value(row: dict[str, Any], text: str) -> Any:
    """An environment variable's text as the option's Python attribute holds it."""
    if row["type"] in ("Mode", "std::string"):
        return text
    if row["type"] == "bool":
        return text != "0"
    if row["type"] == "double":
        return float(text)
    text = text.removesuffix(" (auto)")
    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
    return int(text[:-1] if scale > 1 else text) * scale


def test_readme_table_is_the_generated_one() -> None:
    readme = options_doc.DEFAULT_README.read_text()
    generated = options_doc.with_table(readme, options_doc.table_lines())
    assert generated == readme, (
        "README.md's options table differs from include/dummy_collectives/options_table.def: "
        "run python -m dummy_collectives.options_doc --write"
    )
    assert options_doc.main(["--check"]) == 0


def test_the_table_names_every_option_once() -> None:
    for key in ("name", "env", "field"):
        values = [row[key] for row in ROWS]
        assert len(values) == len(set(values)), (key, values)
    for row in ROWS:
        assert row["env"] == "DUMMY_COLLECTIVES_" + row["name"].upper(), row
        assert row["doc"], row


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_defaults_attribute_and_environment(row: dict[str, Any], monkeypatch: Any) -> None:
    name, default = row["name"], python_value(row, row["default"])
    options = dummy_collectives.Options()
    assert getattr(options, name) == default
    options.validate()
    # The default, spelled as the table spells it, read back from the environment.
    monkeypatch.setenv(row["env"], row["default"].removesuffix(" (auto)"))
    assert getattr(dummy_collectives.Options(), name) == default
    # As a keyword and as an assignment.
    assert getattr(dummy_collectives.Options(**{name: default}), name) == default
    setattr(options, name, default)
    assert getattr(options, name) == default
    # None keeps the default.
    monkeypatch.delenv(row["env"])
    assert getattr(dummy_collectives.Options(**{name: None}), name) == default
    # The table's doc is the attribute's docstring.
    assert row["doc"] in (getattr(type(options), name).__doc__ or ""), name


def bounds(row: dict[str, Any]) -> tuple[list[int | float], list[int | float]]:
    """Values the option's rule accepts and values it refuses, at its edges."""
    low, high = row["low"], row["high"]
    integral = row["type"] != "double"
    step = 1 if integral else 0.5
    low = int(low) if integral else low
    if row["rule"] == "between":
        high = int(high) if integral else high
        return [low, high], [low - step, high + step]
    if row["rule"] == "auto_or_at_least":
        refused = [low - step] if low - step != -1 else []
        return [-1, low], [*refused, -2]
    return [low, low + 1], [low - step]


def refuses(
    row: dict[str, Any], call: Any, *args: Any, environment: bool = False, **kw: Any
) -> str:
    """call(*args, **kw) raises the one ValueError of the option's rule."""
    with pytest.raises(ValueError) as caught:
        call(*args, **kw)
    message = str(caught.value)
    rule = row["accepts"]
    assert f"{row['name']} must be " in message and rule in message, message
    assert row["env"] in message, message
    assert ("from the environment" in message) == environment, message
    return message


@pytest.mark.parametrize("row", NUMERIC, ids=row_id)
def test_one_rule_however_the_value_comes(row: dict[str, Any], monkeypatch: Any) -> None:
    name = row["name"]
    accepted, refused = bounds(row)
    for value in accepted:
        monkeypatch.setenv(row["env"], str(value))
        assert getattr(dummy_collectives.Options(), name) == value
        monkeypatch.delenv(row["env"])
        assert getattr(dummy_collectives.Options(**{name: value}), name) == value
        options = dummy_collectives.Options()
        setattr(options, name, value)
        assert getattr(options, name) == value
    for value in refused:
        monkeypatch.setenv(row["env"], str(value))
        refuses(row, dummy_collectives.Options, environment=True)
        monkeypatch.delenv(row["env"])
        if row["type"] == "size_t" and value < 0:
            # pybind cannot make a negative int a size_t: TypeError, as before.
            with pytest.raises(TypeError):
                dummy_collectives.Options(**{name: value})
            continue
        refuses(row, dummy_collectives.Options, **{name: value})
        options = dummy_collectives.Options()
        refuses(row, setattr, options, name, value)
        assert getattr(options, name) == python_value(row, row["default"])


@pytest.mark.parametrize("row", CHOICE, ids=row_id)
def test_choices(row: dict[str, Any], monkeypatch: Any) -> None:
    name = row["name"]
    for choice in row["choices"]:
        assert getattr(dummy_collectives.Options(**{name: choice}), name) == choice
        monkeypatch.setenv(row["env"], choice)
        assert getattr(dummy_collectives.Options(), name) == choice
    monkeypatch.setenv(row["env"], "bogus")
    refuses(row, dummy_collectives.Options, environment=True)
    monkeypatch.delenv(row["env"])
    refuses(row, dummy_collectives.Options, **{name: "bogus"})
    refuses(row, setattr, dummy_collectives.Options(), name, "bogus")


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_environment_text_that_does_not_parse(row: dict[str, Any], monkeypatch: Any) -> None:
    monkeypatch.setenv(row["env"], "12abc")
    with pytest.raises(ValueError, match=f"{row['name']} must be .*{row['env']}"):
        dummy_collectives.Options()


def test_binary_suffixes_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUMMY_COLLECTIVES_BUFFER_BYTES", "256K")
    monkeypatch.setenv("DUMMY_COLLECTIVES_CUDA_BUFFER_BYTES", "4m")
    options = dummy_collectives.Options()
    assert (options.buffer_bytes, options.cuda_buffer_bytes) == (256 << 10, 4 << 20)


def test_keywords() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'buffer_size'"):
        dummy_collectives.Options(buffer_size=4096)
    with pytest.raises(TypeError):
        dummy_collectives.Options("zero")  # keywords only
    with pytest.raises(TypeError, match="buffer_bytes must be an int"):
        dummy_collectives.Options(buffer_bytes="1M")
    with pytest.raises(TypeError):
        dummy_collectives.Options().threads = "4"  # type: ignore[assignment]
    options = dummy_collectives.Options(mode="zero", peer_access=False, threads=2)
    assert (options.mode, options.peer_access, options.threads) == ("zero", False, 2)
    for row in ROWS:
        assert row["name"] in (type(options).__init__.__doc__ or ""), row["name"]


def test_messages_that_callers_match_are_kept() -> None:
    """Other tests and users match these words (tests/test_peer_access.py, test_topology.py)."""
    with pytest.raises(ValueError, match="peer_access_min_speed must be >= 0"):
        dummy_collectives.Options(peer_access_min_speed=-1.0)
    inline = "inter_host_inline_bytes must be between 1024 and 1048576"
    with pytest.raises(ValueError, match=inline):
        dummy_collectives.Options(inter_host_inline_bytes=16)
    with pytest.raises(ValueError, match="threads must be -1 or >= 1"):
        dummy_collectives.Options(threads=0)
    with pytest.raises(ValueError, match="mode must be 'real' or 'zero'"):
        dummy_collectives.Options(mode="fake")


def test_settings_every_rank_of_a_group_agrees_on() -> None:
    """topology.discover compares these across the group (kPerGroup in the table), by the same
    labels as before."""
    settings = _registration._group_settings(dummy_collectives.Options())
    assert settings == {
        "mode (DUMMY_COLLECTIVES_MODE)": "real",
        "inter_host (DUMMY_COLLECTIVES_INTER_HOST)": "auto",
        "inter_host_inline_bytes (DUMMY_COLLECTIVES_INTER_HOST_INLINE_BYTES)": 16 << 10,
        "inter_host_chunk_bytes (DUMMY_COLLECTIVES_INTER_HOST_CHUNK_BYTES)": 1 << 20,
        "inter_host_min_chunk_bytes (DUMMY_COLLECTIVES_INTER_HOST_MIN_CHUNK_BYTES)": -1,
        "algo (DUMMY_COLLECTIVES_ALGO)": "",
    }
