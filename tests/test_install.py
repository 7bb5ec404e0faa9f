"""Install into .agents/skills (or a client's folder) and verify: copies, folder links, the
manifest beside the folder, tampering, unsafe destinations, the duplicate warning."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from runner.core import UsageError
from runner.install import LEGACY_MANIFEST, install, manifest_path, verify
from runner.load import Bundle

from conftest import REPO


def test_copy_leaves_out_evals_and_records_hashes(good_bundle: Path, tmp_path: Path):
    dest = tmp_path / "project" / ".agents" / "skills"
    result = install(Bundle(good_bundle), dest)
    assert result.installed == ["demo-skill"]
    installed = dest / "demo-skill"
    assert (installed / "SKILL.md").read_text() == (good_bundle / "skills/demo-skill/SKILL.md").read_text()
    assert not (installed / "evals").exists()
    assert sorted(p.name for p in dest.iterdir()) == ["demo-skill"]  # nothing a client could take for a skill
    manifest = json.loads(manifest_path(dest).read_text())
    assert manifest_path(dest) == dest.parent / ".mbskills-skills.json"
    files = manifest["skills"]["demo-skill"]["files"]
    assert set(files) == {"SKILL.md", "card.yaml", "scripts/hello.py", "scripts/hello.sh", "references/notes.md"}
    assert all(len(digest) == 64 for digest in files.values())
    assert verify(dest) == []


def test_verify_reports_added_changed_missing(good_bundle: Path, tmp_path: Path):
    dest = tmp_path / "skills"
    install(Bundle(good_bundle), dest)
    (dest / "demo-skill/SKILL.md").write_text("tampered\n")
    (dest / "demo-skill/scripts/hello.sh").unlink()
    (dest / "demo-skill/scripts/extra.py").write_text("print('new')\n")
    got = sorted(d.format() for d in verify(dest))
    assert got == ["added: demo-skill/scripts/extra.py", "changed: demo-skill/SKILL.md", "missing: demo-skill/scripts/hello.sh"]


def test_reinstall_is_safe_and_refuses_to_drop_local_edits(good_bundle: Path, tmp_path: Path):
    dest = tmp_path / "skills"
    install(Bundle(good_bundle), dest)
    install(Bundle(good_bundle), dest)  # unchanged copy: reinstall is fine
    assert verify(dest) == []
    edited = dest / "demo-skill/SKILL.md"
    edited.write_text("my local notes\n")
    with pytest.raises(UsageError, match="changed since install"):
        install(Bundle(good_bundle), dest)
    assert edited.read_text() == "my local notes\n"  # nothing lost
    install(Bundle(good_bundle), dest, force=True)
    assert verify(dest) == []
    assert not [p for p in dest.iterdir() if p.name.startswith(".mbskills-staging") or p.name.startswith(".mbskills-retired")]


def test_foreign_folder_with_same_name_is_not_overwritten(good_bundle: Path, tmp_path: Path):
    dest = tmp_path / "skills"
    (dest / "demo-skill").mkdir(parents=True)
    (dest / "demo-skill/mine.txt").write_text("keep")
    with pytest.raises(UsageError, match="not installed by mbskills"):
        install(Bundle(good_bundle), dest)
    assert (dest / "demo-skill/mine.txt").read_text() == "keep"


def test_other_skills_in_dest_are_left_alone(good_bundle: Path, tmp_path: Path):
    dest = tmp_path / "skills"
    (dest / "someone-elses-skill").mkdir(parents=True)
    (dest / "someone-elses-skill/SKILL.md").write_text("x")
    install(Bundle(good_bundle), dest)
    assert (dest / "someone-elses-skill/SKILL.md").read_text() == "x"


def test_link_mode_links_the_folder_and_follows_source(good_bundle: Path, tmp_path: Path):
    dest = tmp_path / "skills"
    install(Bundle(good_bundle), dest, link=True)
    installed = dest / "demo-skill"
    # The folder is the link: Codex does not discover a SKILL.md that is itself a symlink.
    assert installed.is_symlink() and os.readlink(installed) == str((good_bundle / "skills/demo-skill").resolve())
    assert not (installed / "SKILL.md").is_symlink() and (installed / "SKILL.md").is_file()
    (good_bundle / "skills/demo-skill/SKILL.md").write_text((good_bundle / "skills/demo-skill/SKILL.md").read_text() + "\nmore\n")
    assert verify(dest) == []  # edits in the source show through a link
    other = tmp_path / "elsewhere"
    shutil.copytree(good_bundle / "skills/demo-skill", other)
    installed.unlink()
    os.symlink(other, installed)
    assert [d.format() for d in verify(dest)] == ["changed: demo-skill/"]
    installed.unlink()
    assert [d.format() for d in verify(dest)] == ["missing: demo-skill/"]
    shutil.copytree(other, installed)  # a real folder where the link was
    assert [d.format() for d in verify(dest)] == ["changed: demo-skill/"]


def test_link_reinstall_replaces_a_copy_and_a_copy_replaces_a_link(good_bundle: Path, tmp_path: Path):
    dest = tmp_path / "skills"
    install(Bundle(good_bundle), dest)
    install(Bundle(good_bundle), dest, link=True)
    assert (dest / "demo-skill").is_symlink() and verify(dest) == []
    install(Bundle(good_bundle), dest)
    assert not (dest / "demo-skill").is_symlink() and (dest / "demo-skill/SKILL.md").is_file() and verify(dest) == []
    assert (good_bundle / "skills/demo-skill/SKILL.md").is_file()  # replacing the link left the source alone


def test_a_manifest_left_inside_the_folder_is_read_and_moved_out(good_bundle: Path, tmp_path: Path):
    dest = tmp_path / "skills"
    install(Bundle(good_bundle), dest)
    manifest_path(dest).rename(dest / LEGACY_MANIFEST)  # as earlier installs left it
    assert verify(dest) == []
    (dest / "demo-skill/SKILL.md").write_text("edited\n")
    assert [d.format() for d in verify(dest)] == ["changed: demo-skill/SKILL.md"]
    with pytest.raises(UsageError, match="changed since install"):
        install(Bundle(good_bundle), dest)  # the old manifest still protects local edits
    install(Bundle(good_bundle), dest, force=True)
    assert not (dest / LEGACY_MANIFEST).exists() and manifest_path(dest).is_file() and verify(dest) == []


def test_dest_that_is_a_file_or_under_a_file(good_bundle: Path, tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        install(Bundle(good_bundle), blocker)
    with pytest.raises(UsageError, match="cannot create directory"):
        install(Bundle(good_bundle), blocker / "skills")


def test_verify_without_manifest_or_with_a_broken_one(tmp_path: Path):
    with pytest.raises(UsageError, match=r"no manifest \(.*\.mbskills-"):
        verify(tmp_path)
    manifest_path(tmp_path).write_text("{not json")
    with pytest.raises(UsageError, match="manifest is unreadable"):
        verify(tmp_path)
    with pytest.raises(UsageError, match="no such folder"):
        verify(tmp_path / "absent")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        verify(tmp_path / "a-file")


@pytest.mark.parametrize("kind", ["outside", "dangling", "loop"])
def test_install_refuses_a_symlink_out_of_the_skill(tmp_path: Path, kind: str):
    from runner.cli import main

    bundle = tmp_path / "bundle"
    shutil.copytree(REPO / "skills", bundle / "skills", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(REPO / "card.yaml", bundle / "card.yaml")
    secret = tmp_path / "secret.txt"
    secret.write_text("not the skill's")
    link = bundle / "skills" / "nemo-mbridge-perf-megatron-fsdp" / "scripts" / "extra.txt"
    if kind == "outside":
        os.symlink(secret, link)
    elif kind == "dangling":
        os.symlink(tmp_path / "gone.txt", link)
    else:
        os.symlink(link, link)
    dest = tmp_path / "dest"
    for mode in ([], ["--link"]):
        assert main(["install", str(dest), "--bundle", str(bundle), *mode]) == 2
        assert not dest.exists() or not any(dest.iterdir())
