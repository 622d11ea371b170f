"""The claims register (reproduce/matrix/claims.yaml): loaded, validated, its roles resolved, checked against
a preset, and handed to the figures in a JSON-able form (results.meta.json `claims`, written by
reproduce/jobs/collect.py; figures/claims.py decides every entry from it).

    reg = load_register()                          # Register: roles + entries, errors name key + field
    meta = register_meta(reg, preset, runs)        # results.meta.json `claims` for this preset's runs
    check_preset(reg, preset, runs, evaluated)     # a confirmation preset: ExperimentError before any job
    python -m reproduce.matrix.claims              # the register, resolved, and its pre-registration digest

An entry names its arms (an arm of reproduce/matrix/arms.py, or a role such as ARMOR that stands for one), a
per-seed quantity (figures/claims.py QUANTITIES: its arity and split), a direction, the split, whether it is
confirmatory and, for a test-split quantity, `at` (last | best). The seeds' role is the preset's
protocol.claims: `design` (every entry exploratory: the design seeds' estimates) or `confirm` (the
confirmatory entries one Holm family, decided on fresh seeds). A confirmation preset must run (and for a
test-split entry evaluate) every arm of every confirmatory entry on at least MIN_CONFIRM_SEEDS seeds, fix θ*
(protocol.peak_step) and the restart point (protocol.restart_step; both checked when the protocol loads),
and use seeds disjoint from its design preset's selection seeds (protocol.claims_design_preset):
`check_preset`, called where the arms are built (arms.build_arms), before any job is planned.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from figures.claims import AT, CONFIRM, DESIGN, DIRECTIONS, QUANTITIES, SPLITS
from figures.stats import ALPHA, GREATER, LESS
from reproduce.matrix.presets import REPO_ROOT, ExperimentError, Preset, load_preset

REGISTER = Path(__file__).with_name("claims.yaml")
MIN_CONFIRM_SEEDS = 10        # the headline (confirmatory) entries: at least this many confirmation seeds
ENTRY_FIELDS = ("key", "paper", "claim", "quantity", "arms", "direction", "split", "confirmatory", "at",
                "covariate")
# the fields pre-registered (docs/claims.md, "Pre-registration"): the digest covers these and the roles
PREREGISTERED = ("key", "quantity", "arms", "direction", "split", "confirmatory", "at", "covariate")
# arm names as reproduce/matrix/arms.py writes them (a register arm that matches none is a typo)
ARM_NAME = re.compile(r"^(dapo|dapo_cont|dapo_natural|qae|qae_cont|armor|anchor_only|anchor_static_clip|"
                      r"anchor_offpolicy|armor_any_anchor|armor_late|dapo_late|armor_reset_never|"
                      r"anchor_only_clean|armor_reset_never_clean|armor_restart_clean|"
                      r"armor_reset_\d+|armor_restart|armor_restart_\d+|qae_armor_reset_never|"
                      r"qae_armor_reset_\d+|armor_tau1|"
                      r"armor_tau1_until\d+|clip_expand|opd|mopd|kl_k[23]_b\d+(?:\.\d+)?(?:e-?\d+)?|"
                      r"mix_a\d+(?:\.\d+)?)$")


class ClaimsError(ExperimentError):
    """The register or its use by a preset is wrong; the message names the entry (or role) and the field."""


HEADLINE = "headline"      # a role's arm in the register: the preset's protocol.headline_arm (Register.bound)


@dataclass(frozen=True)
class Role:
    """A name that stands for an arm (ARMOR -> armor_restart); `before`: the arm whose run the role's arm
    continues (its curve before the arm's own start)."""
    name: str
    arm: str
    before: Optional[str] = None


@dataclass(frozen=True)
class Claim:
    """One register entry (claims.yaml `claims`), validated."""
    key: str
    paper: str
    claim: str
    quantity: str
    arms: tuple[str, ...]
    direction: str
    split: str
    confirmatory: bool = False
    at: Optional[str] = None
    covariate: Optional[str] = None      # an across-seeds quantity's per-step column (steps.parquet)


@dataclass(frozen=True)
class Register:
    roles: dict[str, Role]
    claims: tuple[Claim, ...]
    path: Path
    sha256: str
    declared: Optional[dict[str, Role]] = None     # the roles as the file declares them (before `bound`)

    @property
    def confirmatory(self) -> list[Claim]:
        return [c for c in self.claims if c.confirmatory]

    def bound(self, headline: str, restarted: bool) -> "Register":
        """The register for one preset: a role whose arm is HEADLINE stands for the preset's
        protocol.headline_arm (Table 1's +ARMOR row: one owner of which arm is ARMOR); its `before` holds only
        when that arm restarts from another run (`restarted`: an armor_restart arm)."""
        roles = {k: (Role(k, headline, r.before if restarted else None) if r.arm == HEADLINE else r)
                 for k, r in self.roles.items()}
        return dataclasses.replace(self, roles=roles, declared=self.declared or self.roles)

    def resolve(self, name: str) -> Role:
        """An entry's arm name as {name, arm, before}: a role's arm, or the arm itself."""
        return self.roles.get(name) or Role(name, name)

    def arms_of(self, claim: Claim) -> list[str]:
        """Every arm an entry reads (a role's arm and its `before`)."""
        out = []
        for n in claim.arms:
            r = self.resolve(n)
            out += [r.arm] + ([r.before] if r.before else [])
        return list(dict.fromkeys(out))

    def digest(self) -> str:
        """sha256 of the pre-registered content (roles and every entry's PREREGISTERED fields), canonical
        JSON: the register's pre-registration record (docs/claims.md); comments and wording do not count."""
        roles = self.declared or self.roles           # the file's roles: a preset's binding is not registered
        body = {"roles": {k: [r.arm, r.before] for k, r in sorted(roles.items())},
                "claims": [{f: (list(v) if isinstance(v := getattr(c, f), tuple) else v)
                            for f in PREREGISTERED if f != "covariate" or c.covariate is not None}
                           for c in self.claims]}     # (covariate only where set: older digests hold)
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _fail(where: str, field: str, value: Any, why: str) -> None:
    raise ClaimsError(f"claims register: {where}: {field}: {value!r} {why}")


def _arm_name(where: str, field: str, name: Any) -> str:
    if not isinstance(name, str) or not ARM_NAME.match(name):
        _fail(where, field, name, "is not an arm name of reproduce/matrix/arms.py (e.g. armor, dapo_cont, "
                                  "armor_reset_20, kl_k3_b1e-2, mix_a0.9)")
    return name


def _roles(raw: Any) -> dict[str, Role]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        _fail("roles", "roles", raw, "must be a mapping of role name -> {arm, before}")
    out = {}
    for name, spec in raw.items():
        where = f"role {name!r}"
        if not isinstance(name, str) or ARM_NAME.match(name):
            _fail(where, "name", name, "must be a name that is not an arm's")
        if not isinstance(spec, dict):
            _fail(where, "value", spec, "must be a mapping {arm: ..., before: ...}")
        unknown = sorted(set(spec) - {"arm", "before"})
        if unknown:
            _fail(where, unknown[0], spec[unknown[0]], "is not a field of a role (arm, before)")
        if "arm" not in spec:
            _fail(where, "arm", None, "is required")
        before = spec.get("before")
        arm = spec["arm"] if spec["arm"] == HEADLINE else _arm_name(where, "arm", spec["arm"])
        out[name] = Role(name, arm,
                         None if before is None else _arm_name(where, "before", before))
    return out


def _claim(raw: Any, i: int, roles: dict[str, Role]) -> Claim:
    if not isinstance(raw, dict):
        _fail(f"claims[{i}]", "entry", raw, "must be a mapping")
    key = raw.get("key")
    if not isinstance(key, str) or not re.match(r"^[A-Za-z0-9_.\-]+$", key or ""):
        _fail(f"claims[{i}]", "key", key, "must be a name (letters, digits, _ . -)")
    where = f"claim {key!r}"
    unknown = [f for f in raw if f not in ENTRY_FIELDS]
    if unknown:
        _fail(where, unknown[0], raw[unknown[0]], f"is not a field of an entry ({', '.join(ENTRY_FIELDS)})")
    for f in ("paper", "claim", "quantity", "arms", "direction", "split"):
        if raw.get(f) in (None, ""):
            _fail(where, f, raw.get(f), "is required")
    for f in ("paper", "claim"):
        if not isinstance(raw[f], str):
            _fail(where, f, raw[f], "must be text")
    q = raw["quantity"]
    if q not in QUANTITIES:
        _fail(where, "quantity", q, f"is not a quantity (known: {', '.join(QUANTITIES)})")
    quantity = QUANTITIES[q]
    arms = raw["arms"]
    if not isinstance(arms, list) or len(arms) != quantity.arity:
        _fail(where, "arms", arms, f"must list {quantity.arity} arm(s) for quantity {q}")
    for a in arms:
        if a not in roles:
            _arm_name(where, "arms", a)
    if raw["direction"] not in DIRECTIONS:
        _fail(where, "direction", raw["direction"], f"is not a direction (known: {', '.join(DIRECTIONS)})")
    if raw["split"] not in SPLITS:
        _fail(where, "split", raw["split"], f"is not a split (known: {', '.join(SPLITS)})")
    if raw["split"] != quantity.split:
        _fail(where, "split", raw["split"], f"is not the split of quantity {q} ({quantity.split})")
    conf = raw.get("confirmatory", False)
    if not isinstance(conf, bool):
        _fail(where, "confirmatory", conf, "must be true or false")
    if conf and raw["direction"] not in (GREATER, LESS):
        _fail(where, "direction", raw["direction"], "of a confirmatory entry must be greater or less (a Holm "
                                                    "family tests differences)")
    at = raw.get("at")
    if quantity.needs_at and at not in AT:
        _fail(where, "at", at, f"must be one of {', '.join(AT)} for quantity {q}")
    if not quantity.needs_at and at is not None:
        _fail(where, "at", at, f"applies to the test-split quantities only, not {q}")
    cov = raw.get("covariate")
    if quantity.across_seeds and not (isinstance(cov, str) and cov.isidentifier()):
        _fail(where, "covariate", cov, f"must name a per-step column (steps.parquet) for quantity {q}")
    if not quantity.across_seeds and cov is not None:
        _fail(where, "covariate", cov, f"applies to the across-seeds quantities only, not {q}")
    if quantity.across_seeds and conf:
        _fail(where, "confirmatory", conf, f"must be false for quantity {q}: an across-seeds correlation "
                                           "is not sized by the paired power calculation")
    return Claim(key, raw["paper"], raw["claim"], q, tuple(arms), raw["direction"], raw["split"], conf, at,
                 cov)


def parse_register(data: Any, path: Path = REGISTER, sha256: str = "") -> Register:
    """A Register from the YAML's mapping {roles, claims}; every error names the entry (or role) and field."""
    if not isinstance(data, dict):
        _fail("register", "top level", data, "must be a mapping with roles and claims")
    unknown = sorted(set(data) - {"roles", "claims"})
    if unknown:
        _fail("register", unknown[0], data[unknown[0]], "is not a section (roles, claims)")
    roles = _roles(data.get("roles"))
    raw = data.get("claims")
    if not isinstance(raw, list) or not raw:
        _fail("register", "claims", raw, "must list the entries")
    claims = tuple(_claim(c, i, roles) for i, c in enumerate(raw))
    seen: set[str] = set()
    for c in claims:
        if c.key in seen:
            _fail(f"claim {c.key!r}", "key", c.key, "is used by another entry")
        seen.add(c.key)
    return Register(roles, claims, Path(path), sha256)


def load_register(path: str | Path = REGISTER) -> Register:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ClaimsError(f"claims register {p}: cannot be read ({e.strerror or e})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ClaimsError(f"claims register {p}: not YAML: {e}") from None
    return parse_register(data, p, hashlib.sha256(text.encode()).hexdigest())


# ------------------------------------------------------------------------------------------ a preset
def _design_selection_seeds(design: Preset) -> list[int]:
    """The seeds the design preset chose θ*, the late start and the restart point on (arms.selection_seeds
    over its seeds)."""
    p = design.protocol
    return [s for s in p.seeds if s in p.selection_seeds] or list(p.seeds)


def check_preset(reg: Register, preset: Preset, runs: Mapping[str, list[int]], evaluated: set[str]) -> None:
    """A confirmation preset (protocol.claims: confirm) may decide the confirmatory family: every arm of every
    confirmatory entry runs (a test-split entry's main arms are evaluated) on >= MIN_CONFIRM_SEEDS seeds; θ*
    and (with armor_restart) the restart point are fixed, not chosen from its own seeds; its seeds are
    disjoint from the design preset's selection seeds. `runs`: arm -> the seeds this preset runs it on (its
    whole matrix); `evaluated`: the arms it evaluates. Raises ClaimsError naming the entry and arm (or
    key)."""
    p = preset.protocol
    if p.claims != CONFIRM:
        return
    design = _design_preset(preset)
    overlap = sorted(set(p.seeds) & set(_design_selection_seeds(design)))
    if overlap:
        raise ClaimsError(f"protocol.seeds: {p.seeds} of confirmation preset {preset.name} are not disjoint "
                          f"from the selection seeds {_design_selection_seeds(design)} of its design preset "
                          f"{design.name} (protocol.claims_design_preset): {overlap} in both")
    for c in reg.confirmatory:
        for name in c.arms:
            role = reg.resolve(name)
            for arm, main in ((role.arm, True), (role.before, False)):
                if arm is None:
                    continue
                label = arm if name == arm else f"{arm} (role {name})"
                if arm not in runs:
                    raise ClaimsError(f"claims register: confirmatory entry {c.key!r}: arm {label} is not "
                                      f"run by confirmation preset {preset.name}")
                if len(runs[arm]) < MIN_CONFIRM_SEEDS:
                    raise ClaimsError(f"claims register: confirmatory entry {c.key!r}: arm {label} runs "
                                      f"{len(runs[arm])} seed(s) {runs[arm]} in {preset.name}; a "
                                      f"confirmatory entry needs at least {MIN_CONFIRM_SEEDS}")
                if main and c.split == "test" and arm not in evaluated:
                    raise ClaimsError(f"claims register: confirmatory entry {c.key!r} (test split): arm "
                                      f"{label} is not evaluated by confirmation preset {preset.name}")


def _design_preset(preset: Preset) -> Preset:
    name = preset.protocol.claims_design_preset
    try:
        design = load_preset(name)
    except ExperimentError as e:
        raise ClaimsError(f"protocol.claims_design_preset: {name!r}: {e}") from None
    if design.protocol.claims != DESIGN:
        raise ClaimsError(f"protocol.claims_design_preset: {name!r} is itself a {design.protocol.claims} "
                          "preset; it must be the design preset (protocol.claims: design)")
    return design


def _repo_rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return str(path)


def register_meta(reg: Register, preset: Optional[Preset] = None,
                  runs: Optional[Mapping[str, list[int]]] = None) -> dict:
    """The register as the figures read it (results.meta.json `claims`): the seeds' role and design preset
    (protocol.claims, protocol.claims_design_preset; design without a preset), the roles, and every entry
    with its arms resolved ({name, arm, before}) and, given `runs` (arm -> seeds this preset runs), whether
    the preset runs them (in_preset, missing)."""
    proto = preset.protocol if preset is not None else None
    out_entries = []
    for c in reg.claims:
        e = {"key": c.key, "paper": c.paper, "claim": c.claim, "quantity": c.quantity,
             "arms": [{"name": n, "arm": reg.resolve(n).arm, "before": reg.resolve(n).before}
                      for n in c.arms],
             "direction": c.direction, "split": c.split, "confirmatory": c.confirmatory, "at": c.at}
        if c.covariate is not None:
            e["covariate"] = c.covariate
        if runs is not None:
            missing = [a for a in reg.arms_of(c) if a not in runs]
            e.update(in_preset=not missing, missing=missing)
        out_entries.append(e)
    return {"register": _repo_rel(reg.path), "sha256": reg.sha256, "digest": reg.digest(),
            "role": proto.claims if proto is not None else DESIGN,
            "design_preset": proto.claims_design_preset if proto is not None else None,
            "alpha": ALPHA, "min_confirm_seeds": MIN_CONFIRM_SEEDS,
            "roles": {k: {"arm": r.arm, "before": r.before} for k, r in reg.roles.items()},
            "family": [c.key for c in reg.confirmatory] if proto is not None and proto.claims == CONFIRM
            else [], "entries": out_entries}


def main(argv: Optional[list[str]] = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m reproduce.matrix.claims", description=__doc__.split("\n")[0])
    ap.add_argument("--register", default=str(REGISTER))
    a = ap.parse_args(argv)
    try:
        reg = load_register(a.register)
    except ExperimentError as e:
        print(e, file=sys.stderr)
        return 2
    meta = register_meta(reg)
    print(f"register {meta['register']}: {len(reg.claims)} entries, {len(reg.confirmatory)} confirmatory; "
          f"pre-registration digest {meta['digest']}")
    for e in meta["entries"]:
        arms = ", ".join(x["arm"] + (f" (after {x['before']})" if x["before"] else "") for x in e["arms"])
        print(f"  {'C' if e['confirmatory'] else '-'} {e['key']:<34} {e['quantity']:<17} {e['direction']:<9} "
              f"{e['split']:<10} {arms}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
