"""Resource keys made canonical (SPEC §5), on a real filesystem with real symlinks."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshd.keys import Key, broad_place, canonical_key, describe, from_canonical, path_key, realpath
from meshd.protocol.errors import BadKey


@pytest.fixture
def root() -> Iterator[Path]:
    """A real temp folder (resolved: /tmp may itself be a symlink) with a home inside."""
    top = Path(os.path.realpath(tempfile.mkdtemp(prefix="meshkeys-")))
    (top / "home" / "u" / "project" / "src").mkdir(parents=True)
    (top / "home" / "u" / "link").symlink_to(top / "home" / "u" / "project")
    yield top
    shutil.rmtree(top)


def key(raw: str, root: Path, **kw: Any) -> Key:
    return canonical_key(raw, home=str(root / "home" / "u"), **kw)


class TestPaths:
    def test_bare_absolute_path_means_file(self, root: Path) -> None:
        """A bare absolute path is a file: key."""
        k = key(f"{root}/home/u/project", root)

        assert (k.kind, k.value) == ("file", f"{root}/home/u/project")

    def test_symlinks_are_resolved(self, root: Path) -> None:
        """A path through a symlink canonicalises to the real path."""
        via_link = key(f"file:{root}/home/u/link/src/a.py", root)

        assert via_link == key(f"file:{root}/home/u/project/src/a.py", root)

    def test_tilde_dot_dotdot_and_trailing_slash(self, root: Path) -> None:
        """~, ., .. and a trailing / all fold into one spelling."""
        expected = key(f"file:{root}/home/u/project/src", root)

        assert key("file:~/project/./x/../src/", root) == expected
        assert key("~/link/src", root) == expected

    def test_path_that_does_not_exist_yet(self, root: Path) -> None:
        """A new file under a symlinked folder resolves through the link."""
        k = key("~/link/new/dir/file.txt", root)

        assert k.value == f"{root}/home/u/project/new/dir/file.txt"
        assert k.parts[-3:] == ("new", "dir", "file.txt")

    def test_repo_is_canonicalised_the_same_way(self, root: Path) -> None:
        """repo: keys resolve like file: keys and overlap file: keys under them."""
        repo = key("repo:~/link", root)

        assert repo.value == f"{root}/home/u/project"
        assert repo.overlaps(key("~/project/src/a.py", root))
        assert not repo.overlaps(key("~/projectile", root))

    @pytest.mark.parametrize(
        "raw", ["file:src/a.py", "repo:.", "src/a.py", "./a", "../up", ".", "..", ".hidden"]
    )
    def test_relative_path_is_refused(self, raw: str, root: Path) -> None:
        """Relative paths are refused as such, never resolved against the daemon's cwd,
        and the message does not say a client resolves them (none does)."""
        with pytest.raises(BadKey) as info:
            key(raw, root)

        assert info.value.message == (
            f"bad resource key {raw!r}: the path is relative; give an absolute path (the "
            "daemon does not know the caller's folder)"
        )
        assert info.value.data["key"] == raw

    def test_a_bare_word_is_neither_path_nor_key(self, root: Path) -> None:
        """A bare word might be a misspelt kind: it is named as neither, not as a path."""
        with pytest.raises(BadKey, match=r"'src': it is neither an absolute path nor kind:value"):
            key("src", root)

    def test_other_users_tilde_is_refused(self, root: Path) -> None:
        """~user is not expanded: the daemon only knows its own home."""
        with pytest.raises(BadKey, match="~user"):
            key("~root/x", root)


class TestRealpath:
    """keys.realpath skips what os.path.realpath would find anyway; it must answer alike."""

    def test_answers_as_os_path_realpath(self, root: Path) -> None:
        """Links (absolute, relative, chained, dangling, looping, at the end and on the
        way), missing parts, a file used as a folder, ``.``, ``..``, doubled and
        trailing slashes."""
        (root / "f").write_text("")
        (root / "rel").symlink_to("home/u/project")
        (root / "chain").symlink_to(root / "rel")
        (root / "dangling").symlink_to(root / "nowhere" / "deeper")
        (root / "loop1").symlink_to(root / "loop2")
        (root / "loop2").symlink_to(root / "loop1")
        (root / "home" / "u" / "project" / "up").symlink_to("..")
        tails = [
            "", "/", "//", "f", "f/", "f/x/y", "nowhere", "nowhere/a/b/c.py", "nowhere//a/",
            "home/u/project/src", "home/u/project/src/", "home/u/./project//src/new.py",
            "home/u/link", "home/u/link/src/x.py", "home/u/link/missing/x", "rel/src",
            "chain/src/a", "dangling", "dangling/x", "loop1", "loop1/x", "nowhere/../f",
            "home/u/project/up/link/src", "home/u/link/../project", "home/u/project/up",
            "nowhere/./x", "./f",
        ]  # fmt: skip
        for tail in tails:
            path = f"{root}/{tail}"

            assert realpath(path) == os.path.realpath(path), path

    def test_keys_are_built_as_path_key_builds_them(self, root: Path) -> None:
        """A path key the walk resolved is built from its answer as it stands (no part
        to filter, no join back); one through a link from ``path_key``, which tidies
        what ``os.path.realpath`` may give (``//x`` at a link loop). Either way the
        same value and parts as ``path_key`` of the resolved path."""
        (root / "f").write_text("")
        (root / "loop1").symlink_to(root / "loop2")
        (root / "loop2").symlink_to(root / "loop1")
        tails = ["", "f", "f/x/y", "nowhere/a/b.py", "nowhere//a/./b/", "home/u/./project//src/",
                 "home/u/link/src/new.py", "home/u/project/src/new.py", "home/u/link/../x",
                 "loop1///x/y", "loop1//"]  # fmt: skip
        for tail in tails:
            k = canonical_key(f"file:{root}/{tail}", home="/", broad=True)
            want = path_key("file", realpath(f"{root}/{tail}"))  # realpath: //x at a loop

            assert (k.value, k.parts) == (want.value, want.parts), tail

    def test_a_folder_replaced_by_a_link_is_seen_at_once(self, root: Path) -> None:
        """Nothing is cached: two spellings of one real file never make two keys."""
        path = f"{root}/home/u/work/a.py"
        (root / "home" / "u" / "work").mkdir()
        assert key(path, root).value == path

        (root / "home" / "u" / "work").rmdir()
        (root / "home" / "u" / "work").symlink_to(root / "home" / "u" / "project")

        assert key(path, root) == key(f"{root}/home/u/project/a.py", root)


class TestBroad:
    def test_root_is_refused(self, root: Path) -> None:
        """file:/ needs broad; data.needs says so, and each client names its own switch."""
        with pytest.raises(BadKey, match=r"whole filesystem") as info:
            key("file:/", root)

        assert info.value.data["needs"] == "broad"
        assert "broad=True" not in info.value.message

    def test_home_itself_is_refused(self, root: Path) -> None:
        """The home folder, however spelt, needs broad."""
        for raw in ("~", "file:~/", f"{root}/home/u/project/.."):
            with pytest.raises(BadKey, match="home folder"):
                key(raw, root)

    def test_folder_above_home_is_refused(self, root: Path) -> None:
        """A folder containing home is broader still."""
        with pytest.raises(BadKey, match="contains your home"):
            key(f"{root}/home", root)

    def test_one_rule_for_claims_and_the_board(self, root: Path) -> None:
        """``broad_place`` is the rule both ways: a key needs broad exactly where it says,
        and the board asks the same function of a session's cwd (a shell in ``~`` is
        not told of every file changed beneath it). Boundaries are whole parts."""
        from meshd.domains import board

        home = str(root / "home" / "u")
        places = {"/": True, str(root): True, f"{root}/home": True, home: True,
                  f"{home}/project": False, f"{root}/home/uu": False, f"{root}/hom": False,
                  f"{root}/home/u2": False, f"{root}/elsewhere": False}  # fmt: skip
        for place, broad in places.items():
            assert broad_place(place, [home]) is broad, place
            assert (_needs(place, home) == "broad") is broad, place
        assert board.broad_place is broad_place

    def test_broad_allows_them(self, root: Path) -> None:
        """With broad=True the root and home are accepted."""
        assert key("file:/", root, broad=True).parts == ()
        assert key("~", root, broad=True).value == f"{root}/home/u"


class TestHome:
    """The home folder is resolved on every key, as any path: only the string work of
    taking it apart is kept (it changes only with the daemon's environment)."""

    def test_a_home_through_a_link_follows_the_link_when_it_is_repointed(self, root: Path) -> None:
        """HOME names a link; the user re-points it: the next key checks the new home."""
        (root / "elsewhere").mkdir()
        (root / "h").symlink_to(root / "home" / "u")
        home = str(root / "h")
        assert canonical_key(f"{root}/elsewhere", home=home).value == f"{root}/elsewhere"
        with pytest.raises(BadKey, match="is your home folder"):
            canonical_key(f"{root}/home/u", home=home)

        (root / "h").unlink()
        (root / "h").symlink_to(root / "elsewhere")

        assert canonical_key(f"{root}/home/u", home=home).value == f"{root}/home/u"
        with pytest.raises(BadKey, match="is your home folder"):
            canonical_key(f"{root}/elsewhere", home=home)
        with pytest.raises(BadKey, match="is your home folder"):
            canonical_key("~/", home=home)
        assert canonical_key("~/a.py", home=home).value == f"{root}/elsewhere/a.py"

    def test_a_folder_on_the_homes_way_replaced_by_a_link_is_seen(self, root: Path) -> None:
        """No link on the way at first; then one: the home resolves through it at once."""
        (root / "b" / "u").mkdir(parents=True)
        home = str(root / "a" / "u")
        (root / "a" / "u").mkdir(parents=True)
        assert canonical_key(f"{root}/b/u", home=home).value == f"{root}/b/u"
        assert canonical_key("~/x", home=home).value == f"{root}/a/u/x"

        shutil.rmtree(root / "a")
        (root / "a").symlink_to(root / "b")

        with pytest.raises(BadKey, match="is your home folder"):
            canonical_key(f"{root}/b/u", home=home)
        with pytest.raises(BadKey, match="contains your home folder"):
            canonical_key(f"{root}/b", home=home)
        assert canonical_key("~/x", home=home).value == f"{root}/b/u/x"

    @pytest.mark.parametrize("spelt", ["{h}", "{h}/", "{h}//", "{r}/home//u", "{r}/home/./u/."])
    def test_tilde_keys_with_home_spelt_untidily(self, root: Path, spelt: str) -> None:
        """HOME as the environment spells it (trailing or doubled slashes, ``.``)."""
        home = spelt.format(h=root / "home" / "u", r=root)

        assert canonical_key("~/project/a.py", home=home).value == f"{root}/home/u/project/a.py"
        assert canonical_key("~/link/a.py", home=home).value == f"{root}/home/u/project/a.py"
        for raw in ("~", "~/", f"{root}/home/u/", f"{root}/home/u/project/.."):
            with pytest.raises(BadKey, match="is your home folder"):
                canonical_key(raw, home=home)
        with pytest.raises(BadKey, match="contains your home folder"):
            canonical_key(f"{root}/home", home=home)

    def test_refusals_follow_realpath_of_the_home(self, root: Path) -> None:
        """Whatever the home (links on its way or at its end, missing, dangling, with
        ``..``, relative, ``/``) and whatever the key (under it, beside it, above it,
        through a link, missing), a key is refused exactly when realpath of the home
        lies at or under it -- the rule as it was written before the home's string work
        was kept: the parts of ``realpath(home)`` (``os.path.realpath`` for an absolute
        home; a relative one is taken from ``/``, as ever)."""
        (root / "h").symlink_to(root / "home" / "u")
        (root / "gone").symlink_to(root / "nowhere" / "u")
        (root / "hl").symlink_to("home")
        (root / "loop1").symlink_to(root / "loop2")
        (root / "loop2").symlink_to(root / "loop1")
        homes = [f"{root}/loop1//u", f"{root}/loop1///", f"{root}/home/u", f"{root}/h", f"{root}/hl/u", f"{root}/hl/u/link",
                 f"{root}/missing/u", f"{root}/gone", f"{root}/home/u/../u", "relative/u", "/",
                 f"{root}/home/u/link"]  # fmt: skip
        paths = ["", "home", "home/u", "home/u/project", "home/u/link", "home/u/x/y", "h",
                 "hl", "hl/u", "missing", "missing/u", "missing/u/x", "nowhere", "nowhere/u",
                 "gone", "relative", "loop1", "loop1//u"]  # fmt: skip
        for home in homes:
            real_home = realpath(home)
            assert home == "relative/u" or real_home == os.path.realpath(home)
            want_parts = tuple(filter(None, real_home.split("/")))
            for tail in [*paths, *(f"{p}/" for p in paths if p)]:
                for raw in (f"{root}/{tail}", "~", "~/x", "~/link", "~/.."):
                    k = canonical_key(raw, home=home, broad=True)
                    refused = k.parts == want_parts[: len(k.parts)]
                    needs = _needs(raw, home)

                    assert needs == ("broad" if refused else None), (home, raw)
                    assert broad_place(k.value, [real_home]) == refused, (home, raw)


def _needs(raw: str, home: str) -> str | None:
    """What a key refused without ``broad`` needs (None: accepted)."""
    try:
        canonical_key(raw, home=home)
    except BadKey as err:
        return str(err.data.get("needs"))
    return None


class TestOtherKinds:
    @pytest.mark.parametrize(
        ("raw", "text"),
        [
            ("port:8080", "port:8080"),
            ("port:8080/tcp", "port:8080"),
            ("port:53/udp", "port:53/udp"),
            ("port:0080", "port:80"),
            ("cron:finance-daily", "cron:finance-daily"),
            ("gateway:telegram:home", "gateway:telegram:home"),
            ("account:ibkr", "account:ibkr"),
            ("box:gpu1", "box:gpu1"),
            ("skill:deploy", "skill:deploy"),
            ("res:anything at all", "res:anything at all"),
            ("memory", "memory"),
            ("ui:desktop", "ui:desktop"),
        ],
    )
    def test_canonical_text(self, raw: str, text: str, root: Path) -> None:
        """Each kind has one canonical spelling."""
        assert key(raw, root).text == text

    def test_branch_splits_at_the_last_colon(self, root: Path) -> None:
        """branch:/repo:NAME resolves the repo part and keeps the name."""
        k = key("branch:~/link:feat/auth", root)

        assert k.text == f"branch:{root}/home/u/project:feat/auth"

    def test_exact_kinds_do_not_cover_anything(self, root: Path) -> None:
        """cron:a does not overlap cron:ab."""
        assert not key("cron:a", root).overlaps(key("cron:ab", root))


class TestRefusals:
    @pytest.mark.parametrize(
        ("raw", "why"),
        [
            ("", "empty"),
            ("cron:", "empty"),
            ("nope:x", "unknown kind 'nope'"),
            ("port:0", "1-65535"),
            ("port:65536", "1-65535"),
            ("port:80/sctp", "1-65535"),
            ("port:http", "1-65535"),
            ("branch:/r", "branch:/repo:NAME"),
            ("branch:/r:", "branch:/repo:NAME"),
            ("branch:rel:main", "relative"),
            ("ui:laptop", "ui:desktop"),
            ("memory:x", "memory"),
            ("cron:a\nb", "control or bidi-override characters"),
            ("file:/a\x00b", "control or bidi-override characters"),
            ("file:/x/\u202etxt.exe", "control or bidi-override characters"),
            ("res:a\u2066b", "control or bidi-override characters"),
            ("file:/a\x1b[2Jb", "control or bidi-override characters"),
            ("cron: daily", "spaces"),
            ("file:/" + "a" * 5000, "longer than 4096 bytes"),
        ],
    )
    def test_bad_keys_name_the_key(self, raw: str, why: str, root: Path) -> None:
        """Each bad key is refused with BAD_KEY; the message names it and says why."""
        with pytest.raises(BadKey) as info:
            key(raw, root)

        assert why in info.value.message
        assert info.value.data["code"] == "BAD_KEY"
        assert info.value.data["key"] == raw[:200] + ("…" if len(raw) > 200 else "")


class TestNotUtf8:
    """Names are bytes on Linux: one that is not UTF-8 cannot be stored or sent."""

    @pytest.fixture
    def odd(self, root: Path) -> Path:
        """``root/caf\\xe9`` (Latin-1), a real folder, and ``root/link`` to it."""
        os.mkdir(os.path.join(os.fsencode(root), b"caf\xe9"))
        os.symlink(os.path.join(os.fsencode(root), b"caf\xe9"), root / "link")
        return root

    @pytest.mark.parametrize(
        "raw", ["file:{r}/link/a", "{r}/link", "repo:{r}/link", "branch:{r}/link:main",
                "file:{r}/link/../link/b"],
    )  # fmt: skip
    def test_a_key_resolving_into_it_is_refused(self, odd: Path, raw: str) -> None:
        with pytest.raises(BadKey) as err:
            key(raw.format(r=odd), odd)

        assert 'whose component "caf\\xe9" is not UTF-8' in str(err.value)
        assert err.value.data["component"] == "caf\\xe9"
        str(err.value).encode("utf-8")  # the message itself can be sent
        json.dumps(err.value.data, ensure_ascii=False).encode("utf-8")

    def test_a_key_beside_it_is_not(self, odd: Path) -> None:
        assert key(f"file:{odd}/cafe", odd).value == f"{odd}/cafe"

    def test_a_home_not_named_in_utf8_refuses_no_other_key(self, odd: Path) -> None:
        """The home folder is only compared with, never sent."""
        home = os.fsdecode(os.path.join(os.fsencode(odd), b"caf\xe9"))
        assert canonical_key(f"file:{odd}/x", home=home).value == f"{odd}/x"

    def test_a_key_given_with_lone_surrogates_is_refused_escaped(self, root: Path) -> None:
        """Never off the wire (JSON is UTF-8), but a caller in-process could."""
        with pytest.raises(BadKey, match="not UTF-8") as err:
            key("res:caf\udce9", root)

        assert err.value.data["key"] == "res:caf\\xe9"


class TestRoundTrip:
    def test_canonical_text_rebuilds_the_same_key(self, root: Path) -> None:
        """from_canonical(k.text) == k, without touching the disk (store restore)."""
        for raw in ("~/link/x", "repo:~/project", "port:53/udp", "memory", "branch:~/link:m"):
            k = key(raw, root)

            assert from_canonical(k.text) == k


class TestDescribe:
    def test_home_is_shown_as_tilde(self, root: Path) -> None:
        """Human text shows paths under home with ~."""
        home = str(root / "home" / "u")

        assert describe(key("~/project/src", root), home=home) == "~/project/src"
        assert describe(key("repo:~/project", root), home=home) == "repo ~/project"
        assert describe(key("branch:~/project:main", root), home=home) == (
            "branch main of ~/project"
        )
        assert describe(key("port:53/udp", root), home=home) == "port 53/udp"
        assert describe(key("memory", root)) == "memory"
