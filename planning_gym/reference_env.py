"""A deliberately naive second implementation of the action semantics, straight from rules.json.

It is what an independent tool would write after reading SPEC §2: dictionaries keyed by item
name and a linear scan of the rule list per action.  Tests use it as an oracle for `env.py`
(same inventory after every action of random episodes) and `make bench-gym` uses it as the
baseline that our environment's speed is compared against.
"""
from __future__ import annotations


def reference_step(rules_json: dict, inventory: dict[str, int], action: str) -> bool:
    """Apply ``action`` to a name-keyed inventory in place; return whether it was valid."""
    parts = action.strip().split(" ", 1)
    if "\n" in action.strip() or len(parts) != 2 or not parts[1].strip():
        return False
    verb, item = parts[0], parts[1].strip()
    items = {it["name"]: it for it in rules_json["items"]}
    if verb == rules_json["gather_verb"]:
        if item in items and items[item]["base"]:
            inventory[item] = inventory.get(item, 0) + 1
            return True
        return False
    for rule in rules_json["rules"]:
        if rule["verb"] == verb and rule["output"] == item and \
                all(inventory.get(k, 0) >= c for k, c in rule["inputs"].items()):
            for k, c in rule["inputs"].items():
                inventory[k] -= c
                if inventory[k] == 0:
                    del inventory[k]
            inventory[item] = inventory.get(item, 0) + 1
            return True
    return False
