"""Bad input, second round (issue 27, class 5): secrets never leave in errors or JSON.

A token is planted in each place a secret can sit by mistake: the stack's secret key in clear text, a mistyped
secret key (its value is then an unknown key's), a secret-named key nested where the schema has none, any
unknown key, a key gpufleet does not read, a private key pasted where the public one belongs, a file that is not
a stack file given (or linked) as the stack, an inventory's host variables. Every command that reads a stack
runs on each, text and ``--json``; the token must appear in none of their output, and each still fails with
the contract (exit 1, file and key named, ``<redacted>`` in place of the value).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import REDACTED
from tests.test_bad_inputs import GOOD, HEAD, POOLS
from tests.test_bad_inputs_round2 import invoke

TOKEN = "gpufleet-canary-7f3a9c0e51d2"
KUBECONFIG = ("apiVersion: v1\\nkind: Config\\nusers:\\n- name: admin\\n  user:\\n"
              f"    token: {TOKEN}\\n")
PRIVATE_KEY = f"-----BEGIN OPENSSH PRIVATE KEY----- {TOKEN} -----END OPENSSH PRIVATE KEY-----"

#: Stack files (Pulumi.lab.yaml) holding the token, each with the key its error must name.
STACKS: dict[str, tuple[str, str]] = {
    "clear-text-secret": (HEAD + f'  gpufleet:kubeconfig: "{KUBECONFIG}"\n' + POOLS, "gpufleet:kubeconfig"),
    "mistyped-secret-key": (HEAD + f'  gpufleet:kubeconfg: "{KUBECONFIG}"\n' + POOLS, "gpufleet:kubeconfg"),
    "mistyped-secret-mapping": (HEAD + f'  gpufleet:kubeConfig: {{secure: "{TOKEN}", token: {TOKEN}}}\n' + POOLS,
                                "gpufleet:kubeConfig"),
    "any-unknown-key": (HEAD + f"  gpufleet:kc: {TOKEN}\n" + POOLS, "gpufleet:kc"),
    "not-read-key": (HEAD + f"  gpufleet:gpuOperator: {{driver: {{repoConfig: {{password: {TOKEN}}}}}}}\n" + POOLS,
                     "gpufleet:gpuOperator"),
    "nested-secret-name": (HEAD + f"  gpufleet:networks: {{password: {TOKEN}}}\n" + POOLS,
                           "gpufleet:networks.password"),
    "nested-unknown-key": (HEAD + f"  gpufleet:storage: {{lustre_auth: [{TOKEN}]}}\n" + POOLS,
                           "gpufleet:storage.lustre_auth"),
    "private-key-as-public-key": (
        HEAD.replace("existing", "azure") + f'  gpufleet:azure: {{location: eastus, ssh_public_key: "{PRIVATE_KEY}"}}\n'
        + POOLS, "gpufleet:azure.ssh_public_key"),
    "secret-named-field": (HEAD.replace("    profile: h100-cuda12.8\n",
                                        f"    profile: h100-cuda12.8\n    api_token: {TOKEN}\n") + POOLS,
                           "gpufleet:lock.api_token"),
}

#: Files that are not stack files, given as the stack (named so that every command reads them).
NOT_STACKS: dict[str, str] = {
    "bare-token": f"{TOKEN}\n",
    "token-list": f"- {TOKEN}\n- other\n",
    "aws-credentials": f"[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = {TOKEN}\n",
    "config-scalar": f"config: {TOKEN}\n",
    "config-list": f'{{"config": ["{TOKEN}"]}}\n',
    "kubeconfig": KUBECONFIG.replace("\\n", "\n"),
    "private-key": PRIVATE_KEY.replace(" -----END", "\n-----END").replace("----- ", "-----\n") + "\n",
    "netrc": f"machine example.com login me password {TOKEN}\n",
}

#: Every command that reads a stack, with and without --json where it has it.
COMMANDS: list[list[str]] = [
    ["lock", "check", "--stack", "{f}"], ["lock", "check", "--stack", "{f}", "--json"],
    ["lock", "show", "--stack", "{f}"], ["lock", "show", "--stack", "{f}", "--json"],
    ["lock", "render", "--stack", "{f}", "--inventory", "{inv}"],
    ["plan", "--stack", "{f}"], ["plan", "--stack", "{f}", "--json"],
    ["validate", "--stack", "{f}"], ["validate", "--stack", "{f}", "--json"],
    ["drift", "--stack", "{f}"], ["drift", "--stack", "{f}", "--json"],
    ["audit", "--stack", "{f}"], ["audit", "--stack", "{f}", "--json"],
    # The commands that act on hosts read the stack first, so a refused stack stops them with the same error.
    ["up", "--stack", "{f}"], ["converge", "--stack", "{f}"], ["remediate", "--stack", "{f}"],
    ["status", "--stack", "{f}"], ["down", "--stack", "{f}"],
]


def _run_all(tmp_path: Path, stack: Path) -> list[tuple[str, str]]:
    """Run every command on ``stack``; each must fail with the contract and never print the token."""
    outputs = []
    for argv in COMMANDS:
        args = [a.replace("{f}", str(stack)).replace("{inv}", str(tmp_path / "inv")) for a in argv]
        code, stdout, stderr = invoke(args)
        assert code == 1, (args, stdout, stderr)
        assert TOKEN not in stdout + stderr, (args, stdout + stderr)
        outputs.append((stdout, stderr))
    return outputs


@pytest.mark.parametrize("name", sorted(STACKS))
def test_a_secret_in_a_stack_never_leaves_in_errors(tmp_path: Path, name: str) -> None:
    text, key = STACKS[name]
    assert TOKEN in text
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(text)
    (_, text_err), (json_out, _), *_ = _run_all(tmp_path, stack)
    assert f"{key} = '{REDACTED}'" in text_err, text_err
    errors = json.loads(json_out)["errors"]
    assert [e["value"] for e in errors if e["key"] == key] == [REDACTED], errors


@pytest.mark.parametrize("name", sorted(NOT_STACKS))
@pytest.mark.parametrize("linked", [False, True], ids=["file", "symlink"])
def test_a_file_that_is_not_a_stack_is_never_shown(tmp_path: Path, name: str, linked: bool) -> None:
    secret = tmp_path / "secret" / name
    secret.parent.mkdir()
    secret.write_text(NOT_STACKS[name])
    stack = tmp_path / "Pulumi.lab.yaml"
    if linked:
        stack.symlink_to(secret)
    else:
        stack.write_text(NOT_STACKS[name])
    _run_all(tmp_path, stack)


@pytest.mark.parametrize("text", [
    f"all: {{children: {{gpu: {{hosts: [{{gpu-0: {{ansible_password: {TOKEN}}}}}]}}}}}}\n",
    f"all: {{children: {{gpu: [{{ansible_become_password: {TOKEN}}}]}}}}\n",
    f"all: [ansible_password={TOKEN}]\n",
    f"- ansible_ssh_pass={TOKEN}\n",
])
def test_an_inventorys_host_variables_are_never_shown(tmp_path: Path, text: str) -> None:
    from gpufleet.errors import InputError
    from gpufleet.validation.run import inventory_hosts

    inv = tmp_path / "hosts.yml"
    inv.write_text(text)
    with pytest.raises(InputError, match="not a mapping") as e:
        inventory_hosts(inv)
    assert TOKEN not in str(e.value) and TOKEN not in repr(e.value.to_json())
    assert e.value.problems[0].value == REDACTED


def test_the_good_stack_still_shows_its_values(tmp_path: Path) -> None:
    """Redaction is for secrets and what gpufleet does not read: a wrong value of a known key is still shown."""
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(GOOD.replace("count: 2", "count: many"))
    code, _, stderr = invoke(["lock", "check", "--stack", str(stack)])
    assert code == 1 and "gpufleet:pools[1].count = 'many'" in stderr
