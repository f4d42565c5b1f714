"""Seeded, offline generator of ALFWorld household problems (TextWorld-PDDL).

`generate_problem(task_type, seed, difficulty) -> (pddl_problem, task_text, expert_plan)` is pure
Python. `write_game` and `make_env` need the optional extra ``[alfworld]`` (``alfworld`` ships the
PDDL domain, the grammar and the `AlfredDemangler`/`AlfredInfos` wrappers; ``textworld`` plays it).

Conventions the game engine imposes (checked against alfworld 0.4.2):

* Ids are ALFRED-mangled ("Apple|+00.10|+00.90|+00.20" -> ``Apple_bar__plus_00_dot_10_bar_…``);
  `AlfredDemangler` turns them into "<name> <k>" (per name, ids sorted ascending get n, n-1, …, 1).
* Every receptacle has its own location; the agent starts where there is none.
* The domain uses SinkBasinType/MicrowaveType/FridgeType/KnifeType/ButterKnifeType without
  declaring them, so every problem declares all five.
* take/move need an openable receptacle opened; heat/cool/clean only need the agent at the
  appliance holding the object; "use desklamp 1" needs the lamp at the agent's location.
* The intro's "UNKNOWN GOAL" is replaced in the grammar by the task text (as alfworld's
  ``add_task_to_grammar`` does); the problem carries it as a ``;; task: …`` comment.
"""
from __future__ import annotations

import json
import os
import random
import re
import tempfile
from collections import defaultdict

__all__ = ["TASK_TYPES", "generate_problem", "write_game", "make_env", "play"]

TASK_TYPES = (
    "pick_and_place",
    "pick_two",
    "look_at_obj_in_light",
    "pick_heat_then_place",
    "pick_cool_then_place",
    "pick_clean_then_place",
)
# ALFWorld's own names -> ours
ALIASES = {
    "pick_and_place_simple": "pick_and_place",
    "pick_two_obj_and_place": "pick_two",
    "pick_heat_then_place_in_recep": "pick_heat_then_place",
    "pick_cool_then_place_in_recep": "pick_cool_then_place",
    "pick_clean_then_place_in_recep": "pick_clean_then_place",
}

# receptacle type -> (openable, categories of objects it can contain)
RECEPTACLES = {
    "CounterTop": (False, {"food", "dish", "utensil", "bath", "small"}),
    "DiningTable": (False, {"food", "dish", "utensil", "small"}),
    "Cabinet": (True, {"dish", "bath", "utensil"}),
    "Drawer": (True, {"utensil", "bath", "small"}),
    "Fridge": (True, {"food", "dish"}),
    "Microwave": (True, {"food", "dish"}),
    "SinkBasin": (False, {"food", "dish", "utensil", "bath"}),
    "StoveBurner": (False, {"dish"}),
    "Shelf": (False, {"dish", "bath", "small"}),
    "GarbageCan": (False, {"food", "bath", "small"}),
    "CoffeeMachine": (False, set()),
    "Toaster": (False, set()),
    "Toilet": (False, {"bath"}),
    "BathtubBasin": (False, {"bath"}),
    "TowelHolder": (False, set()),
    "HandTowelHolder": (False, set()),
    "ToiletPaperHanger": (False, set()),
    "Bed": (False, {"small"}),
    "Desk": (False, {"small"}),
    "SideTable": (False, {"small"}),
    "Dresser": (False, {"small", "bath"}),
    "Safe": (True, {"small"}),
    "ArmChair": (False, {"small"}),
    "Sofa": (False, {"small"}),
    "CoffeeTable": (False, {"small"}),
    "TVStand": (False, {"small"}),
}
# object type -> (category, properties)
OBJECTS = {
    "Apple": ("food", {"heat", "cool", "clean"}),
    "Potato": ("food", {"heat", "cool", "clean"}),
    "Tomato": ("food", {"heat", "cool", "clean"}),
    "Egg": ("food", {"heat", "cool", "clean"}),
    "Bread": ("food", {"heat", "cool"}),
    "Lettuce": ("food", {"cool", "clean"}),
    "Mug": ("dish", {"heat", "cool", "clean"}),
    "Cup": ("dish", {"heat", "cool", "clean"}),
    "Plate": ("dish", {"heat", "cool", "clean"}),
    "Bowl": ("dish", {"cool", "clean"}),
    "Pan": ("dish", {"cool", "clean"}),
    "Pot": ("dish", {"cool", "clean"}),
    "Knife": ("utensil", {"clean"}),
    "ButterKnife": ("utensil", {"clean"}),
    "Fork": ("utensil", {"clean"}),
    "Spoon": ("utensil", {"clean"}),
    "Spatula": ("utensil", {"clean"}),
    "Ladle": ("utensil", {"clean"}),
    "SoapBar": ("bath", {"clean"}),
    "Cloth": ("bath", {"clean"}),
    "DishSponge": ("bath", {"clean"}),
    "SprayBottle": ("bath", set()),
    "ToiletPaper": ("bath", set()),
    "SoapBottle": ("bath", set()),
    "Candle": ("bath", set()),
    "Book": ("small", set()),
    "CD": ("small", set()),
    "CellPhone": ("small", set()),
    "CreditCard": ("small", set()),
    "KeyChain": ("small", set()),
    "Pen": ("small", set()),
    "Pencil": ("small", set()),
    "Watch": ("small", set()),
    "AlarmClock": ("small", set()),
    "Statue": ("small", set()),
    "Vase": ("small", set()),
    "RemoteControl": ("small", set()),
    "Pillow": ("small", set()),
    "Laptop": ("small", set()),
    "Newspaper": ("small", set()),
}
LAMP = "DeskLamp"
LAMP_HOLDERS = ("Desk", "SideTable", "Dresser")
MULTI = {"Cabinet", "Drawer", "CounterTop", "StoveBurner", "Shelf", "SideTable", "SinkBasin"}
ROOMS = {
    "kitchen": ["CounterTop", "Cabinet", "Drawer", "Fridge", "Microwave", "SinkBasin",
                "StoveBurner", "GarbageCan", "DiningTable", "Shelf", "CoffeeMachine", "Toaster"],
    "bathroom": ["Toilet", "SinkBasin", "BathtubBasin", "CounterTop", "Cabinet", "Drawer",
                 "TowelHolder", "HandTowelHolder", "ToiletPaperHanger", "GarbageCan", "Shelf"],
    "bedroom": ["Bed", "Desk", "SideTable", "Dresser", "Drawer", "Shelf", "GarbageCan", "Safe",
                "ArmChair"],
    "livingroom": ["Sofa", "ArmChair", "CoffeeTable", "SideTable", "DiningTable", "Drawer", "Shelf",
                   "TVStand", "Dresser", "Cabinet", "GarbageCan"],
}
# constants referenced by alfred.pddl actions; must always be declared
DOMAIN_RTYPES = ("SinkBasin", "Microwave", "Fridge")
DOMAIN_OTYPES = ("Knife", "ButterKnife")

TEMPLATES = {  # from alfworld/gen/goal_library.py
    "pick_and_place": ["put a {obj} in {recep}", "put some {obj} on {recep}"],
    "pick_two": ["put two {obj} in {recep}", "find two {obj} and put them in {recep}"],
    "look_at_obj_in_light": ["look at {obj} under the {toggle}", "examine the {obj} with the {toggle}"],
    "pick_heat_then_place": ["put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}"],
    "pick_cool_then_place": ["put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}"],
    "pick_clean_then_place": ["put a clean {obj} in {recep}", "clean some {obj} and put it in {recep}"],
}
APPLIANCE = {"pick_heat_then_place": ("Microwave", "heat", "heat"),
             "pick_cool_then_place": ("Fridge", "cool", "cool"),
             "pick_clean_then_place": ("SinkBasin", "clean", "clean")}


def _can_hold(rtype, otype):
    return otype != LAMP and OBJECTS[otype][0] in RECEPTACLES[rtype][1]


def _mangle(text):
    for a, b in (("|", "_bar_"), ("+", "_plus_"), ("-", "_minus_"), (".", "_dot_"), (",", "_comma_")):
        text = text.replace(a, b)
    return text


def display_names(ids):
    """Replicates alfworld.agents.utils.misc.Demangler (shuffle=False) on lower-cased ids."""
    groups = defaultdict(list)
    for i in sorted(x.lower() for x in ids):
        if "_bar_" not in i:
            continue
        name = i.split("_bar_", 1)[0] + ("basin" if "basin" in i else "")
        groups[name].append(i)
    out = {}
    for name, lst in groups.items():
        for k, i in enumerate(lst):
            out[i] = f"{name} {len(lst) - k}"
    return out


class _Scene:
    def __init__(self, rng):
        self.rng = rng
        self.used = set()
        self.recs = []          # list of (id, rtype)
        self.objs = []          # list of (id, otype)
        self.rec_loc = {}
        self.contents = defaultdict(list)   # rec id -> [obj ids]
        self.obj_rec = {}

    def _coord(self):
        return "{:+06.2f}".format(self.rng.uniform(-4.0, 4.0))

    def new_id(self, kind):
        while True:
            x, y, z = self._coord(), self._coord(), self._coord()
            if kind == "SinkBasin":
                raw = f"Sink|{x}|{y}|{z}|SinkBasin"
            elif kind == "BathtubBasin":
                raw = f"Bathtub|{x}|{y}|{z}|BathtubBasin"
            else:
                raw = f"{kind}|{x}|{y}|{z}"
            m = _mangle(raw)
            if m.lower() not in self.used:
                self.used.add(m.lower())
                return m

    def new_loc(self):
        while True:
            m = "loc_bar_{}_bar_{}_bar_{}_bar_{}".format(self.rng.randint(0, 12), self.rng.randint(0, 12),
                                                           self.rng.choice((0, 1, 2, 3)), self.rng.choice((0, 30, 45, 60)))
            if m not in self.used:
                self.used.add(m)
                return m

    def add_rec(self, rtype):
        rid = self.new_id(rtype)
        self.recs.append((rid, rtype))
        self.rec_loc[rid] = self.new_loc()
        return rid

    def add_obj(self, otype, rid):
        oid = self.new_id(otype)
        self.objs.append((oid, otype))
        self.contents[rid].append(oid)
        self.obj_rec[oid] = rid
        return oid


def _goal(task_type, otype, rtype):
    if task_type == "pick_and_place":
        return (f"(exists (?r - receptacle) (exists (?o - object) (and (inReceptacle ?o ?r) "
                f"(objectType ?o {otype}Type) (receptacleType ?r {rtype}Type))))")
    if task_type == "pick_two":
        return (f"(exists (?r - receptacle) (exists (?o1 - object) (and (objectType ?o1 {otype}Type) "
                f"(receptacleType ?r {rtype}Type) (inReceptacle ?o1 ?r) (exists (?o2 - object) (and "
                f"(not (= ?o1 ?o2)) (objectType ?o2 {otype}Type) (receptacleType ?r {rtype}Type) "
                f"(inReceptacle ?o2 ?r))))))")
    if task_type == "look_at_obj_in_light":
        return (f"(exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and "
                f"(objectType ?ot {LAMP}Type) (toggleable ?ot) (isToggled ?ot) (receptacleAtLocation ?r ?l) "
                f"(atLocation ?a ?l) (inReceptacle ?ot ?r))) "
                f"(exists (?o - object ?a - agent) (and (objectType ?o {otype}Type) (holds ?a ?o)))")
    prop, state = {"pick_heat_then_place": ("heatable", "isHot"),
                   "pick_cool_then_place": ("coolable", "isCool"),
                   "pick_clean_then_place": ("cleanable", "isClean")}[task_type]
    return (f"(exists (?r - receptacle) (exists (?o - object) (and ({prop} ?o) (objectType ?o {otype}Type) "
            f"(receptacleType ?r {rtype}Type) ({state} ?o) (inReceptacle ?o ?r))))")


def generate_problem(task_type: str, seed: int, difficulty: int = 1, expert: str = "search"):
    """Returns (pddl_problem_text, task_text, expert_plan).

    difficulty >= 1: more receptacles and distractors; targets more often inside closed
    receptacles and further along the expert's search order.
    expert="search" (default): the plan only uses what an agent could observe: it visits candidate
    receptacles in a fixed order (opening closed ones) until it sees the target; its length grows with
    difficulty.  expert="oracle": goes straight to the target (shortest plan of this form).
    """
    task_type = ALIASES.get(task_type, task_type)
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task_type {task_type!r}; expected one of {TASK_TYPES}")
    if expert not in ("search", "oracle"):
        raise ValueError("expert must be 'search' or 'oracle'")
    difficulty = max(1, int(difficulty))
    rng = random.Random(f"alfworld_gen:{task_type}:{seed}:{difficulty}")
    d = difficulty

    # ---- room, target, destination ------------------------------------------------------------
    if task_type in APPLIANCE:
        appliance, prop, verb = APPLIANCE[task_type]
        rooms = ["kitchen"] if prop != "clean" else ["kitchen", "bathroom"]
    elif task_type == "look_at_obj_in_light":
        appliance, prop = None, None
        rooms = ["bedroom", "livingroom"]
    else:
        appliance, prop = None, None
        rooms = list(ROOMS)
    room = rng.choice(rooms)
    rtypes_room = ROOMS[room]
    cats_room = set().union(*(RECEPTACLES[r][1] for r in rtypes_room))
    otypes = [o for o, (cat, props) in OBJECTS.items()
              if cat in cats_room and (prop is None or prop in props)
              # need >=2 receptacle types that can hold it (a source and a different destination)
              and sum(_can_hold(r, o) for r in rtypes_room if r != appliance) >= 2]
    if task_type == "look_at_obj_in_light":
        otypes = [o for o in otypes if OBJECTS[o][0] == "small"]
    target = rng.choice(sorted(otypes))
    dest_type = None
    if task_type != "look_at_obj_in_light":
        dest_choices = [r for r in rtypes_room if _can_hold(r, target) and r != appliance]
        if d == 1:  # prefer non-openable destinations at the easiest level
            dest_choices = [r for r in dest_choices if not RECEPTACLES[r][0]] or dest_choices
        dest_type = rng.choice(dest_choices)

    # ---- receptacles ---------------------------------------------------------------------------
    n_rec = rng.randint(3 + 4 * (d - 1) + 1, 3 + 4 * (d - 1) + 3)   # d1: 4-6, d2: 8-10, d3: 12-14
    sc = _Scene(rng)
    needed = []
    if appliance:
        needed.append(appliance)
    if dest_type:
        needed.append(dest_type)
    if task_type == "look_at_obj_in_light":
        needed.append(rng.choice([r for r in LAMP_HOLDERS if r in rtypes_room]))
    # at least one source type different from dest that can hold the target
    src_types = [r for r in rtypes_room if _can_hold(r, target) and r != dest_type]
    needed.append(rng.choice(src_types))
    if d >= 2:  # guarantee some closed receptacle able to hide the target
        closed_src = [r for r in src_types if RECEPTACLES[r][0] and r != appliance]
        if closed_src:
            needed.append(rng.choice(closed_src))
    type_list = list(dict.fromkeys(needed))
    while len(type_list) < max(n_rec, len(needed)):
        r = rng.choice(rtypes_room)
        if r in type_list and r not in MULTI:
            if all((x in type_list and x not in MULTI) for x in rtypes_room):
                r = rng.choice(sorted(MULTI & set(rtypes_room)))
            else:
                continue
        type_list.append(r)
    for r in type_list:
        sc.add_rec(r)

    # the expert's search order: a seeded permutation of the receptacles
    search_order = [rid for rid, _ in sc.recs]
    rng.shuffle(search_order)
    rtype_of = dict(sc.recs)

    # ---- place targets ("hidden further" with difficulty) --------------------------------------
    def pick_source(exclude=()):
        cands = [r for r in search_order if _can_hold(rtype_of[r], target)
                 and rtype_of[r] != dest_type and r not in exclude]
        if not cands and exclude:  # the second target shares a receptacle when no other can hold it
            return pick_source()
        if d == 1:
            pool = [r for r in cands if not RECEPTACLES[rtype_of[r]][0]] or cands
            return pool[0] if rng.random() < 0.7 else rng.choice(pool[:3])
        if d == 2:
            idx = rng.randint(1, max(1, len(cands) // 3)) if len(cands) > 1 else 0
            return cands[min(idx, len(cands) - 1)]
        closed = [r for r in cands if RECEPTACLES[rtype_of[r]][0]]
        lo = len(cands) // 2
        late = [r for r in cands[lo:] if r in closed] or closed or cands[lo:]
        return rng.choice(late)

    n_targets = 2 if task_type == "pick_two" else 1
    targets, used_src = [], []
    for k in range(n_targets):
        src = pick_source(exclude=used_src if (d >= 2 and k > 0) else ())
        used_src.append(src)
        targets.append(sc.add_obj(target, src))

    lamp = None
    if task_type == "look_at_obj_in_light":
        holders = [r for r in search_order if rtype_of[r] in LAMP_HOLDERS]
        lamp_rec = holders[0] if d == 1 else rng.choice(holders)
        lamp = sc.add_obj(LAMP, lamp_rec)

    # ---- distractors ---------------------------------------------------------------------------
    n_dis = rng.randint(2 + 3 * (d - 1), 4 + 4 * (d - 1))   # d1: 2-4, d2: 5-8, d3: 8-12
    dis_types = [o for o in OBJECTS if o != target and any(_can_hold(t, o) for t in set(type_list))]
    for _ in range(n_dis):
        o = rng.choice(sorted(dis_types))
        holders = [r for r, t in sc.recs if _can_hold(t, o)]
        sc.add_obj(o, rng.choice(holders))

    # ---- PDDL ----------------------------------------------------------------------------------
    otype_set = sorted({t for _, t in sc.objs} | set(DOMAIN_OTYPES) | {target})
    rtype_set = sorted({t for _, t in sc.recs} | set(DOMAIN_RTYPES))
    start = sc.new_loc()
    lines_obj = ["agent1 - agent"]
    lines_obj += [f"{t}Type - otype" for t in otype_set]
    lines_obj += [f"{t}Type - rtype" for t in rtype_set]
    lines_obj += [f"{oid} - object" for oid, _ in sc.objs]
    lines_obj += [f"{rid} - receptacle" for rid, _ in sc.recs]
    lines_obj += [f"{loc} - location" for loc in [start] + [sc.rec_loc[r] for r, _ in sc.recs]]

    init = [f"(atLocation agent1 {start})"]
    for rid, rt in sc.recs:
        init.append(f"(receptacleAtLocation {rid} {sc.rec_loc[rid]})")
        init.append(f"(receptacleType {rid} {rt}Type)")
        if RECEPTACLES[rt][0]:
            init.append(f"(openable {rid})")
    for oid, ot in sc.objs:
        rid = sc.obj_rec[oid]
        init.append(f"(objectType {oid} {ot}Type)")
        init.append(f"(inReceptacle {oid} {rid})")
        init.append(f"(objectAtLocation {oid} {sc.rec_loc[rid]})")
        if ot == LAMP:
            init.append(f"(toggleable {oid})")
            continue
        init.append(f"(pickupable {oid})")
        props = OBJECTS[ot][1]
        for p, pred in (("heat", "heatable"), ("cool", "coolable"), ("clean", "cleanable")):
            if p in props:
                init.append(f"({pred} {oid})")
    for rt in rtype_set:
        for ot in otype_set:
            if rt in RECEPTACLES and ot in OBJECTS and _can_hold(rt, ot):
                init.append(f"(canContain {rt}Type {ot}Type)")

    obj_l = target.lower()
    tmpl = rng.choice(TEMPLATES[task_type])
    task_text = tmpl.format(obj=obj_l, recep=(dest_type or "").lower(), toggle=LAMP.lower())
    goal = _goal(task_type, target, dest_type)
    nl = "\n    "
    problem = (
        f";; task: {task_text}\n"
        f";; generated by evoharness_bpe: task_type={task_type} seed={seed} difficulty={d}\n"
        "(define (problem plan_trial)\n"
        "  (:domain alfred)\n"
        f"  (:objects{nl}{nl.join(lines_obj)}\n  )\n"
        f"  (:init{nl}{nl.join(init)}\n  )\n"
        f"  (:goal (and {goal}))\n"
        ")\n"
    )

    # ---- expert plan ---------------------------------------------------------------------------
    names = display_names([i for i, _ in sc.objs] + [i for i, _ in sc.recs])
    N = lambda i: names[i.lower()]  # noqa: E731
    plan = []
    st = {"at": None}
    opened, seen = set(), {}   # seen: rec -> list of objects observed there
    contents = {r: list(v) for r, v in sc.contents.items()}

    def observe(r):
        if not RECEPTACLES[rtype_of[r]][0] or r in opened:
            seen[r] = list(contents.get(r, []))

    def goto(r):
        if st["at"] != r:
            plan.append(f"go to {N(r)}")
            st["at"] = r
        observe(r)

    def ensure_open(r):
        if RECEPTACLES[rtype_of[r]][0] and r not in opened:
            plan.append(f"open {N(r)}")
            opened.add(r)
        observe(r)

    if expert == "oracle":
        seen.update({r: list(contents.get(r, [])) for r in search_order})

    def find(objs, search_types):
        """Visit receptacles until one of `objs` has been observed; return (obj, rec)."""
        def known():
            for r in search_order:
                for o in seen.get(r, []):
                    if o in objs and o in contents.get(r, []):
                        return o, r
            return None
        hit = known()
        for r in search_order:
            if hit:
                break
            if r in seen or rtype_of[r] not in search_types:
                continue
            goto(r)
            ensure_open(r)
            hit = known()
        assert hit, "target not found (generator bug)"
        return hit

    def take(o, r):
        goto(r)
        ensure_open(r)
        plan.append(f"take {N(o)} from {N(r)}")
        contents[r].remove(o)

    def put(o, r):
        goto(r)
        ensure_open(r)
        plan.append(f"move {N(o)} to {N(r)}")
        contents.setdefault(r, []).append(o)

    target_search = {t for t in rtype_of.values() if _can_hold(t, target)}
    remaining = list(targets)
    dest = None
    if dest_type:
        dests = [r for r in search_order if rtype_of[r] == dest_type]
        dest = next((r for r in dests if r in opened or not RECEPTACLES[dest_type][0]), dests[0])
    for _ in range(n_targets):
        o, r = find(remaining, target_search - {dest_type})
        remaining.remove(o)
        take(o, r)
        if appliance:
            app = st["at"] if rtype_of.get(st["at"]) == appliance else \
                next(x for x in search_order if rtype_of[x] == appliance)
            goto(app)
            plan.append(f"{verb} {N(o)} with {N(app)}")
        if task_type == "look_at_obj_in_light":
            _, lr = find([lamp], set(LAMP_HOLDERS))
            goto(lr)
            plan.append(f"use {N(lamp)}")
        else:
            if dest in opened or not RECEPTACLES[dest_type][0]:
                pass
            else:  # prefer an already opened destination instance if any
                dest = next((x for x in search_order if rtype_of[x] == dest_type and x in opened), dest)
            put(o, dest)
    return problem, task_text, plan


# ================================================================================================
# Playing through textworld.gym
# ================================================================================================
_TASK_RE = re.compile(r"^;; task: (.*)$", re.M)


def _alfworld_data():
    import alfworld
    d = os.path.join(os.path.dirname(alfworld.__file__), "data")
    with open(os.path.join(d, "alfred.pddl")) as f:
        domain = f.read()
    with open(os.path.join(d, "alfred.twl2")) as f:
        grammar = f.read()
    return domain, grammar


def write_game(problem_text, path, task_text=None):
    """Write a game.tw-pddl JSON ({pddl_domain, grammar, pddl_problem}) usable by textworld."""
    if task_text is None:
        m = _TASK_RE.search(problem_text)
        task_text = m.group(1) if m else "UNKNOWN GOAL"
    domain, grammar = _alfworld_data()
    data = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", task_text),
            "pddl_problem": problem_text, "solvable": True}
    with open(path, "w") as f:
        json.dump(data, f)
    return path


def make_env(game_file, max_episode_steps=100, request_infos=None):
    """textworld.gym env for one tw-pddl game, ALFWorld-style (AlfredDemangler + AlfredInfos)."""
    import textworld
    import textworld.gym
    from textworld.gym.utils import registry
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    infos = request_infos or textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    env_id = textworld.gym.register_game(game_file, infos, max_episode_steps=max_episode_steps,
                                         wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])
    env = textworld.gym.make(env_id)
    registry.pop(env_id, None)   # keep the global registry from growing
    return env


def play(problem_text, commands, task_text=None, max_episode_steps=None):
    """Play `commands`; returns (won, observations, admissible_commands_per_step).

    observations[0] / admissible[0] are for the initial state, then one entry per executed command.
    Stops early once the game is done (won or step limit).
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = write_game(problem_text, os.path.join(tmp, "game.tw-pddl"), task_text)
        env = make_env(path, max_episode_steps or len(commands) + 10)
        try:
            obs, infos = env.reset()
            observations, admissible = [obs], [infos["admissible_commands"]]
            won = bool(infos["won"])
            for cmd in commands:
                if won:
                    break
                obs, score, done, infos = env.step(cmd)
                observations.append(obs)
                admissible.append(infos["admissible_commands"])
                won = bool(infos["won"])
                if done:
                    break
        finally:
            env.close()
    return won, observations, admissible
