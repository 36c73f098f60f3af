#!/usr/bin/env python3
"""Derives demo/network/network.json and screenplay.json from the paper demo's data.

Usage: derive_network.py <dir with tasks.json and actions.json>

Only data is taken over (schemas, seed rows, tools, topology, models, the screenplay).
Server descriptions are written here in our own words. Servers that used MongoDB get the SQL
schema of the same kind, because every database-backed server here has its own SQLite file.
"""
import json
import sys
from pathlib import Path

src = Path(sys.argv[1])
t = json.loads((src / "tasks.json").read_text())
actions = json.loads((src / "actions.json").read_text())
out = Path(__file__).resolve().parent

# The tasks a server asks another server for that only read (a lookup): a call changes nothing
# there, so a shadow check may make it for real. requestDeliveryDriver books a driver.
READ_ONLY_TASKS = {"isOpen", "getTemperature", "trafficInfo", "todayWeather"}

# Our own words for each server: who it is and the house rules it must follow.
DESCRIPTIONS = {
    "weatherServer": "A weather service. It answers forecast questions for a day (and a place) "
        "with its getWeather tool.",
    "hotel1": "The Lodge Hotel near Paris. It takes room bookings: look up free rooms in the "
        "database and never book a room twice for overlapping dates.",
    "hotel2": "The Plaza Hotel in Barcelona. It takes room bookings: look up free rooms in the "
        "database and never book a room twice for overlapping dates.",
    "hotel3": "The Grand Hotel in London. It takes room bookings (never book a room twice for "
        "overlapping dates). Asked for a restaurant, it recommends Il Forno (Italian), but only "
        "after the isOpen tool confirms Il Forno is open on that date; otherwise it answers "
        "\"No restaurant\".",
    "skiResort1": "The Alpine Resort near Zurich, a ski resort. A room may be booked only if it "
        "is free and the getTemperature forecast for the date is between -10 and +1 degrees "
        "Celsius. Skis are rented from the database; no room booking is needed for that.",
    "skiResort2": "The Snowy Peaks ski resort near Vienna. A room may be booked only if it is "
        "free and the getTemperature forecast for the date is between -10 and +1 degrees "
        "Celsius. Skis are rented from the database; no room booking is needed for that. Asked "
        "for a restaurant, it recommends Bengal Delight (Indian) if the isOpen tool says it is "
        "open on that date, and \"No restaurant\" otherwise.",
    "restaurant1": "Il Forno, an Italian restaurant in London, open 12:00-22:00 every day but "
        "Monday (closed). It books tables (a booking is one surname, date and hour; never "
        "twice), tells its opening times, and delivers orders through requestDeliveryDriver.",
    "restaurant2": "Royal Oak, a British restaurant in Cairo, open 17:00-23:00 every day but "
        "Tuesday (closed). It books tables (a booking is one surname, date and hour; never "
        "twice), tells its opening times, and delivers orders through requestDeliveryDriver.",
    "restaurant3": "Bengal Delight, an Indian restaurant in Vienna, open 17:00-23:00 every day "
        "but Tuesday (closed). It books tables (a booking is one surname, date and hour; never "
        "twice) and tells its opening times.",
    "deliveryService": "A food delivery service. It sends a driver (sendDriver) to an address, "
        "but refuses when trafficInfo reports heavy traffic or an accident there.",
    "cinema1": "The Silver Screen cinema in Paris. It lists the films screened on a date and "
        "sells tickets while a screening has enough left, keeping the count in the database.",
    "cinema2": "The Golden Globe cinema in Berlin. It lists the films screened on a date and "
        "sells tickets while a screening has enough left, keeping the count in the database.",
    "taxi1": "Yellow Cab, a taxi company in New York. It finds a free taxi (getAvailableTaxi) "
        "and assigns it (assignTaxi). A ride costs $20, plus 20% between 20:00 and 23:00 and "
        "plus 20% when trafficInfo reports heavy traffic or an accident (surcharges add up).",
    "taxi2": "Blue Taxi, a taxi company in London. It finds a free taxi (getAvailableTaxi) and "
        "assigns it (assignTaxi). A ride costs $30, plus 20% if todayWeather says rain and plus "
        "20% when trafficInfo reports heavy traffic or an accident (surcharges add up).",
    "trafficServer": "A traffic information service: the trafficInfo tool gives the traffic "
        "for a place and a date.",
}

def schema(s):
    return {"type": "object", "properties": s["input"].get("properties", {}),
            "required": s["input"].get("required", [])}

def out_schema(s):
    props = dict(s["output"].get("properties", {}))
    # One schema in the data has its "type" one level too high (dayOfTheWeek's "day").
    if isinstance(props.get("type"), str):
        kind = props.pop("type")
        for value in props.values():
            value.setdefault("type", kind)
    return {"type": "object", "properties": props,
            "required": s["output"].get("required", [])}

tasks = {}
for name, v in t["userTaskTypes"].items():
    s = v["schema"]
    tasks[name] = {"description": s["description"], "input": schema(s), "output": out_schema(s)}
for name, v in t["helperTaskTypes"].items():
    s = v["schema"]
    tasks[name] = {"description": s["description"], "input": schema(s), "output": out_schema(s)}

databases = {}
for name, db in t["dbSchemas"].items():
    if db["dbType"] != "sql":
        continue
    kind = name.removesuffix("-sql")
    tables = {}
    for table, spec in db["tables"].items():
        tables[table] = {"description": spec["description"], "columns": spec["columns"],
                         "constraints": spec.get("constraints", []),
                         "rows": spec.get("initialValues", [])}
    databases[kind] = {"tables": tables}

servers = []
for sid, s in t["servers"].items():
    db = s["internalDbSchema"]
    tools = []
    for tool in s["tools"]:
        if tool["kind"] == "mock":
            ts = t["toolSchemas"][tool["toolSchema"]]
            tools.append({"name": tool["name"], "mock": tool["mockFunction"],
                          "description": ts["description"], "input": schema(ts),
                          "output": out_schema(ts)})
        elif tool["kind"] == "external":
            entry = {"name": tool["name"], "external": tool["targetServer"],
                     "task": tool["name"]}
            if tool["name"] in READ_ONLY_TASKS:
                entry["readOnly"] = True
            tools.append(entry)
    servers.append({
        "id": sid, "model": s["modelType"], "description": DESCRIPTIONS[sid],
        "database": db.rsplit("-", 1)[0] if db else None,
        "tools": tools, "tasks": s["idealTasks"], "protocolDb": s["protocolDb"],
    })

users = [{"id": uid, "model": u["modelType"], "protocolDb": u["protocolDb"]}
         for uid, u in t["users"].items()]
pdbs = [{"id": k, "peers": v["peers"]} for k, v in t["protocolDbs"].items()]

network = {
    "today": "2024-09-22",
    "menus": t["mockTools"]["getMenu"]["data"],
    "tasks": tasks,
    "databases": databases,
    "servers": servers,
    "users": users,
    "protocolDbs": pdbs,
}
(out / "network.json").write_text(json.dumps(network, indent=1, ensure_ascii=False) + "\n")
(out / "screenplay.json").write_text(
    "[\n" + ",\n".join(json.dumps(a, ensure_ascii=False) for a in actions) + "\n]\n")
print("servers", len(servers), "users", len(users), "tasks", len(tasks), "entries", len(actions))
