"""Hypothesis strategies for command lines of the node commands: real flags with good, bad and
random values, unknown flags, node names and selectors of every shape, in any order."""

from __future__ import annotations

from hypothesis import strategies as st

COMMANDS = ("drain", "cordon", "uncordon")

_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=12,
)
_NODES = st.sampled_from(
    ["node-0", "node-1", "node-9", "node/node-1", "nodes/node-0", "a/b/c", "", "Bad_Name", "pod/x"]
)
_SELECTORS = st.sampled_from(
    ["role=worker", "a in (b", "!a", "x,,y", "a=b,c!=d", "", "a notin ()", "kubernetes.io/os=linux"]
)
_DURATIONS = st.sampled_from(["0", "1s", "1h30m", "1x", "", "-1s", "90", ".s", "1s2", "3m.5s"])
_INTS = st.sampled_from(["0", "-1", "7", "0x1f", "x", "", "1_0", "99999999999999999999", "08"])
_DRY_RUNS = st.sampled_from(["none", "client", "server", "bogus", "true", ""])

_VALUED = {
    "--selector": _SELECTORS,
    "-l": _SELECTORS,
    "--pod-selector": _SELECTORS,
    "--chunk-size": _INTS,
    "--grace-period": _INTS,
    "--skip-wait-for-delete-timeout": _INTS,
    "--parallel": _INTS,
    "--timeout": _DURATIONS,
    "--volume-timeout": _DURATIONS,
}
_SWITCHES = [
    "--force",
    "--ignore-daemonsets",
    "--delete-emptydir-data",
    "--disable-eviction",
    "--respect-rules",
    "--no-respect-rules",
    "--wait-for-volumes",
    "--evict-daemonsets",
    "--force-delete-stuck",
    "--dry-run",
]


def _is_help(token: str) -> bool:
    return token in ("-h", "--help") or (token.startswith("-h") and not token.startswith("--"))


_NODE_FLAGS = ("--selector", "-l", "--chunk-size")


def _valued(flags: list[str]) -> st.SearchStrategy[list[str]]:
    def pair(flag: str) -> st.SearchStrategy[list[str]]:
        value = st.one_of(_VALUED[flag], _TEXT)
        joined = value.map(lambda v: [f"{flag}={v}"] if flag.startswith("--") else [flag, v])
        return st.one_of(value.map(lambda v: [flag, v]), joined)

    return st.sampled_from(sorted(flags)).flatmap(pair)


def _pieces(verb: str) -> st.SearchStrategy[list[str]]:
    """Mostly the verb's own flags and node names, so that many command lines get as far as
    the cluster; now and then an unknown flag or any text."""
    valued = sorted(_VALUED) if verb == "drain" else list(_NODE_FLAGS)
    switches = _SWITCHES if verb == "drain" else ["--dry-run"]
    common = st.one_of(
        _NODES.map(lambda n: [n]),
        _valued(valued),
        st.sampled_from(switches).map(lambda s: [s]),
        _DRY_RUNS.map(lambda v: [f"--dry-run={v}"]),
    )
    rare = st.one_of(
        st.from_regex(r"--[a-z][a-z-]{0,12}", fullmatch=True).map(lambda f: [f]),
        _TEXT.map(lambda t: [t]),
    )
    return st.one_of(common, common, common, common, common, common, rare)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """A command and up to five pieces; never `--help` (which prints help and exits 0) and never
    a cluster choice (the caller adds its own `--kubeconfig`)."""
    verb = draw(st.sampled_from(COMMANDS))
    pieces = draw(st.lists(_pieces(verb), max_size=5))
    argv = [verb] + [token for piece in pieces for token in piece]
    tokens = argv[1:]
    if any(_is_help(t) or t.startswith(("--kubeconfig", "--context")) for t in tokens):
        return [verb, "--no-such-flag"]
    return argv
