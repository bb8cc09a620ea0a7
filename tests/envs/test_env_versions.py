"""Version environments: `dlperf envs install FW --version X` beside the pinned set, for real.

jax 0.9.2 and tensorflow-cpu 2.20.0 are resolved by pip into hashed locks kept beside their
environments and installed under the shared environment cache (the default root, so a machine
keeps them between runs: the install is then a no-op that reads no index). Each trains a tiny
one-layer BERT through `dlperf run --env FW==X`, beside the pinned version, and the result says
which version ran (what is checked is the environment the case runs in, whatever the model:
the BERT compiles in under half the time of ResNet-50's, and `envs check` below trains ResNet-50
in the version environment). The refusals (a version that does not exist, one this Python
cannot install, one the backend cannot drive, torch, a framework that declares no versions) are
one line and exit 2, with nothing installed.
"""

from __future__ import annotations

import json
import re

import pytest

from ceiling import slow_setup
from conftest import dlperf, dlperf_main, make_list, tiny_nets
from measured import check_measured
from dlperf import envs
from dlperf.envs import versions
from package_index import PYPI, needs_pypi, reachable_or_skip

# what `make test` installs before the tests (the Makefile's TEST_VERSION_ENVS): there, the
# fixture's install below is a no-op
VERSIONS = dict(entry.split("==") for entry in make_list("TEST_VERSION_ENVS"))
PINNED = {"jax": "0.10.2", "tensorflow": "2.21.0"}
CARRIERS = {"jax": ["jax", "jaxlib"], "tensorflow": ["tensorflow-cpu"]}
TINY = [*tiny_nets(bert_layers=1)["bert-base"], "--warmup-steps", "1", "--steps", "2",
        "--repeats", "1"]


@pytest.fixture(scope="module", params=sorted(VERSIONS))
@slow_setup("the first run installs the version environment from the package index (minutes); "
            "a no-op once it is in the shared cache")
def version_env(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(framework, FW==X), installed through the real command (a no-op once it is there)."""
    name, version = request.param, VERSIONS[request.param]
    env = versions.env_name(name, version)
    if envs.manage.read_stamp(env) is None or not versions.lock_file(env).exists():
        reachable_or_skip(PYPI)  # a first install resolves from the index
    proc = dlperf("envs", "install", name, "--version", version, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return name, env


def test_install_writes_the_lock_and_stamp_and_is_then_a_no_op(version_env):
    name, env = version_env
    version = VERSIONS[name]
    lock_lines = [x for x in versions.lock_file(env).read_text().splitlines()
                  if x and not x.startswith("#")]
    assert lock_lines and all(re.fullmatch(r"[a-z0-9-]+==\S+ --hash=sha256:[0-9a-f]{64}", x)
                              for x in lock_lines)
    for package in CARRIERS[name]:
        assert any(x.startswith(f"{package}=={version} ") for x in lock_lines), package
    assert versions.lock_file(env).parent == envs.root()  # beside the environment, not in src/
    stamp = envs.manage.read_stamp(env)
    assert stamp is not None
    assert stamp["framework_version"] == version and stamp["requested_version"] == version
    assert stamp["python"].startswith(envs.registry.get(name).python + ".")
    assert stamp["requirements"] == lock_lines  # what was installed is the lock
    fw = versions.framework(name, version)
    assert stamp["hash"] == fw.requirements_hash(stamp["python"].rsplit(".", 1)[0])
    again = dlperf("envs", "install", name, "--version", version, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"{env}: up to date — {name} {version}," in again.stdout


def test_envs_list_shows_the_version_environment(version_env):
    name, env = version_env
    proc = dlperf("envs", "list", env={"COLUMNS": "250"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if f"│ {env} " in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    stamp = envs.manage.read_stamp(env)
    assert cells[:6] == [env, "cpu", "installed", stamp["python"], VERSIONS[name],
                         stamp["hash"][:8]]
    assert cells[6] == str(envs.env_dir(env))
    pinned_row = next(line for line in proc.stdout.splitlines() if f"│ {name} " in line)
    assert PINNED[name] in pinned_row  # the pinned environment is still there, listed apart


def test_tiny_case_runs_in_the_version_and_in_the_pinned_environment(version_env, tmp_path):
    name, env = version_env
    envs.install(name, say=lambda line: None)  # the pinned set (a no-op after `make envs`)
    seen = {}
    for which in (env, ""):
        out = tmp_path / f"result{which}.json"
        proc = dlperf("run", "--framework", name, *(["--env", which] if which else []), *TINY,
                      "--db", str(tmp_path / "r.db"), "--json", str(out), timeout=900)
        result = json.loads(out.read_text())
        assert proc.returncode == 0 and result["status"] == "ok", (result.get("error"),
                                                                  result.get("stderr_tail"))
        check_measured(result)
        seen[which] = result["environment"]
    assert seen[env]["name"] == env and seen[env]["framework_version"] == VERSIONS[name]
    assert seen[env]["python"] == str(envs.manage.env_python(env))
    assert seen[""]["name"] == name and seen[""]["framework_version"] == PINNED[name]
    assert seen[env]["packages_hash"] != seen[""]["packages_hash"]
    # stored with distinct identities and grouped by them: two rows, each with its version
    # (read back through dlperf's main in this process, like the history below: test_fuzz_cli
    # checks that a real process answers alike)
    report = dlperf_main("report", "--db", str(tmp_path / "r.db"), "--format", "md",
                         check=True).stdout
    # a framework's row may carry a footnote mark (tensorflow's weight-decay note): "| name [1] |"
    rows = [line for line in report.splitlines()
            if line.startswith(f"| {name} |") or line.startswith(f"| {name} [")]
    assert len(rows) == 2, report
    assert any(f"| {VERSIONS[name]} |" in r and env in r for r in rows), rows
    assert any(f"| {PINNED[name]} |" in r and env not in r for r in rows), rows
    # one experiment across versions: history orders it by version
    ordered = dlperf_main("history", "--db", str(tmp_path / "r.db"), "--framework", name,
                          "--model", "bert-base", "--order", "version", check=True).stdout
    assert ordered.index(VERSIONS[name]) < ordered.index(PINNED[name])


@pytest.mark.parametrize("version_env", ["jax"], indirect=True)  # one end-to-end check is enough
def test_envs_check_takes_a_version_environment(version_env):
    name, env = version_env
    proc = dlperf("envs", "check", env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{env}: import ok, version {VERSIONS[name]}" in proc.stdout
    assert f"{env}: tiny training step ok" in proc.stdout


# --- refusals: one line, exit 2, nothing installed ------------------------------------------

def _refused(*args: str, action: str = "install", env: dict[str, str] | None = None) -> str:
    proc = dlperf_main("envs", action, *args, timeout=120, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert lines and lines[-1].startswith("dlperf envs: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[-1][len("dlperf envs: error: "):]


def _nothing_installed(name: str, version: str) -> None:
    env = versions.env_name(name, version)
    assert not envs.env_dir(env).exists() and not versions.lock_file(env).exists()


@pytest.mark.parallel
@pytest.mark.parametrize("name,version,oldest", [("jax", "0.8.0", "0.8.1"),
                                                 ("tensorflow", "2.18.1", "2.19.0")])
def test_a_version_older_than_the_backend_drives_is_refused_with_the_reason(name, version,
                                                                             oldest):
    line = _refused(name, "--version", version)
    assert line.startswith(f"--version: {name} {version} is older than the backend can drive "
                           f"(oldest {oldest}): ")
    assert envs.registry.get(name).versions.oldest_reason in line
    _nothing_installed(name, version)


@pytest.mark.parallel
def test_torch_version_is_refused_pointing_at_python():
    line = _refused("torch", "--version", "2.1.0")
    assert "dlperf's own environment" in line and "--python PATH" in line


@pytest.mark.parallel
@pytest.mark.parametrize("args,expected", [
    (["paddle", "--version", "3.0.0"], "--version: paddle runs only at its pinned version: "),
    (["jax", "--version", "latest"], "--version: 'latest' is not a release number like 0.9.2"),
    (["jax", "--version", "0.9.2", "--variant", "cuda"],
     "--version: version environments are CPU builds; "),
    (["jax", "tensorflow", "--version", "0.9.2"], "--version applies to one framework at a time"),
])
def test_other_version_requests_are_refused(args, expected):
    assert _refused(*args).startswith(expected)


@pytest.mark.parallel
@needs_pypi
def test_a_version_that_does_not_exist_names_the_nearest_that_do():
    line = _refused("jax", "--version", "0.9.5")
    assert line == "--version: jax 0.9.5 does not exist on https://pypi.org/simple/; nearest: " \
                   "0.9.2, 0.10.0"
    _nothing_installed("jax", "0.9.5")


@pytest.mark.parallel
@needs_pypi
def test_a_version_this_python_cannot_install_names_the_nearest_that_can():
    """jax 0.12 needs Python 3.12; the jax environment's Python is 3.11 (pip says which)."""
    line = _refused("jax", "--version", "0.12.0")
    assert re.fullmatch(r"--version: jax 0\.12\.0 requires Python >=3\.1[2-9] \(this is 3\.11\); "
                        r"nearest that install here: 0\.10\.\d+", line), line
    _nothing_installed("jax", "0.12.0")


@pytest.mark.parallel
def test_nearest_versions_are_the_closest_below_and_above():
    published = ["0.8.0", "0.8.1", "0.9.0", "0.9.0.1", "0.9.1", "0.9.2", "0.10.0", "0.11.0rc1"]
    assert versions.nearest("0.9.5", published) == ["0.9.2", "0.10.0"]
    assert versions.nearest("9", published) == ["0.10.0"]  # pre-releases only when asked
    assert versions.nearest("0.7", published, oldest="0.8.1") == ["0.8.1"]
    assert versions.release_key("2.16") == versions.release_key("2.16.0")
    assert versions.release_key("2.15.0") < versions.release_key("2.15.0.post1")
    assert versions.release_key("1.0; rm -rf") is None


@pytest.mark.parallel
def test_envs_remove_refuses_a_pinned_or_unknown_environment():
    proc = dlperf_main("envs", "remove", "jax")
    assert proc.returncode == 2 and "is not a version environment" in proc.stderr
    proc = dlperf_main("envs", "remove", "jax==0.0.1")
    assert proc.returncode == 2 and "no environment jax==0.0.1" in proc.stderr


@pytest.mark.parallel
def test_a_name_that_leaves_the_environments_folder_is_refused_and_nothing_deleted(tmp_path):
    """`FW==` then a path: one line, exit 2, and the folder it points at outside the
    environments' root is still there (the two folders made here are all such a path needs to
    resolve and open its install lock)."""
    root, victim = tmp_path / "envs", tmp_path / "victim"
    (victim / "keep").mkdir(parents=True)
    for made in ("jax==", ".jax=="):
        (root / made).mkdir(parents=True)
    env = {"DLPERF_ENVS": str(root)}
    for name in ("jax==/../../victim", "jax==../victim", "jax==0.9.2/.."):
        line = _refused(name, action="remove", env=env)
        assert line.startswith(f"envs remove: {name!r} is not a version environment"), line
        proc = dlperf_main("envs", "check", name, env=env)
        assert proc.returncode == 2 and f"unknown framework {name!r}" in proc.stderr, proc.stderr
    assert (victim / "keep").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["envs", "victim"]


@pytest.mark.parallel
def test_a_name_or_version_ending_in_a_newline_is_refused(tmp_path):
    """`$` matches before a final newline: such a name is no environment, and such a version
    makes none (nothing locked, nothing created)."""
    root = tmp_path / "envs"
    (root / "jax==0.9.2\n").mkdir(parents=True)  # as an install that took the version left it
    env = {"DLPERF_ENVS": str(root)}
    line = _refused("jax==0.9.2\n", action="remove", env=env)
    assert line.startswith("envs remove: 'jax==0.9.2\\n' is not a version environment"), line
    assert _refused("jax", "--version", "0.9.2\n", env=env) == \
        "--version: '0.9.2\\n' is not a release number like 0.9.2"
    assert [p.name for p in root.iterdir()] == ["jax==0.9.2\n"]
