//! One test per task type: a known-right and a known-wrong answer, the truth taken from the
//! seeded mocks and the seed rows; the stateful cases (a slot booked twice, a third ski of a
//! type and date, a screening sold out) in screenplay order.

use agora_judge::mocks::{self, MockKind, weekday};
use agora_judge::spec::NetworkSpec;
use agora_judge::{Judge, TableRow, Verdict, Writes};
use serde_json::{Value, json};

const SEED: u64 = 42;

fn network() -> NetworkSpec {
    NetworkSpec::embedded().unwrap()
}

fn mock(network: &NetworkSpec, kind: MockKind, tool: &str, args: Value) -> Value {
    mocks::answer(kind, tool, SEED, &args, network).unwrap()
}

fn is_wrong(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Wrong(_))
}

/// The first date from `2024-01-01` on for which `pick` holds.
fn date_where(mut pick: impl FnMut(&str) -> bool) -> String {
    (0..365)
        .map(|d| agora_judge::mocks::civil_from_days(19_723 + d))
        .find(|date| pick(date))
        .unwrap()
}

#[test]
fn query_weather_needs_the_forecast_of_the_requested_date() {
    let network = network();
    let mut judge = Judge::new(&network, SEED);
    let data = json!({"date": "2024-05-11", "location": "London, UK"});
    let forecast = mock(
        &network,
        MockKind::Weather,
        "getWeather",
        json!({"date": "2024-05-11", "location": "London, UK"}),
    );
    let right =
        json!({"temperature": forecast["temperature"], "precipitation": forecast["precipitation"]});
    assert_eq!(
        judge.judge("weatherServer", "queryWeather", &data, Some(&right)),
        Verdict::Correct
    );
    // The place spelled as its city is another draw; still the forecast for that date.
    let city = mock(
        &network,
        MockKind::Weather,
        "getWeather",
        json!({"date": "2024-05-11", "location": "London"}),
    );
    let also = json!({"temperature": city["temperature"], "precipitation": city["precipitation"]});
    assert_eq!(
        judge.judge("weatherServer", "queryWeather", &data, Some(&also)),
        Verdict::Correct
    );
    // Today's forecast instead of the requested day's.
    let today = mock(
        &network,
        MockKind::Weather,
        "getWeather",
        json!({"date": "2024-09-22", "location": "London, UK"}),
    );
    let wrong =
        json!({"temperature": today["temperature"], "precipitation": today["precipitation"]});
    assert_ne!(today["temperature"], forecast["temperature"]);
    assert!(is_wrong(&judge.judge(
        "weatherServer",
        "queryWeather",
        &data,
        Some(&wrong)
    )));
    assert_eq!(
        judge.judge("weatherServer", "queryWeather", &data, None),
        Verdict::Failed
    );
}

#[test]
fn a_hotel_has_three_rooms_and_never_books_one_twice() {
    let network = network();
    let mut judge = Judge::new(&network, SEED);
    let stay = json!({"startDate": "2024-08-11", "endDate": "2024-08-28"});
    let overlapping = json!({"startDate": "2024-08-20", "endDate": "2024-08-30"});
    let ok = json!({"status": "success", "roomNumber": 101});
    assert_eq!(
        judge.judge("hotel1", "bookRoom", &stay, Some(&ok)),
        Verdict::Correct
    );
    // Room 101 is taken now: a success naming it is wrong, naming 102 right.
    assert!(is_wrong(&judge.judge(
        "hotel1",
        "bookRoom",
        &overlapping,
        Some(&ok)
    )));
    let ok103 = json!({"status": "success", "roomNumber": 103});
    assert_eq!(
        judge.judge("hotel1", "bookRoom", &stay, Some(&ok103)),
        Verdict::Correct
    );
    // All three are booked over 08-20..08-28: the fourth booking fails.
    let fail = json!({"status": "failure", "error": "no room"});
    assert_eq!(
        judge.judge("hotel1", "bookRoom", &overlapping, Some(&fail)),
        Verdict::Correct
    );
    assert!(is_wrong(&judge.judge(
        "hotel1",
        "bookRoom",
        &stay,
        Some(&json!({"status": "success"}))
    )));
    // Later dates are free again; another hotel has its own rooms.
    let later = json!({"startDate": "2024-09-01", "endDate": "2024-09-02"});
    assert_eq!(
        judge.judge(
            "hotel1",
            "bookRoom",
            &later,
            Some(&json!({"status": "success"}))
        ),
        Verdict::Correct
    );
    assert!(is_wrong(&judge.judge(
        "hotel2",
        "bookRoom",
        &stay,
        Some(&fail)
    )));
}

#[test]
fn a_ski_resort_books_rooms_only_in_the_cold() {
    let network = network();
    let temperature = |date: &str, place: Option<&str>| {
        let mut args = json!({"date": date});
        if let Some(place) = place {
            args["location"] = json!(place);
        }
        mock(&network, MockKind::Weather, "getWeather", args)["temperature"]
            .as_i64()
            .unwrap()
    };
    let cold = |t: i64| (-10..=1).contains(&t);
    // Dates where every spelling agrees, so exactly one status is right.
    let cold_day =
        date_where(|d| cold(temperature(d, Some("Vienna"))) && cold(temperature(d, None)));
    let warm_day =
        date_where(|d| !cold(temperature(d, Some("Vienna"))) && !cold(temperature(d, None)));
    let mut judge = Judge::new(&network, SEED);
    let success = json!({"status": "success", "roomNumber": 101});
    let failure = json!({"status": "failure", "error": "too warm"});
    let on = |day: &str| json!({"startDate": day, "endDate": day});
    assert_eq!(
        judge.judge("skiResort2", "bookRoom", &on(&cold_day), Some(&success)),
        Verdict::Correct
    );
    assert!(is_wrong(&judge.judge(
        "skiResort2",
        "bookRoom",
        &on(&warm_day),
        Some(&success)
    )));
    assert_eq!(
        judge.judge("skiResort2", "bookRoom", &on(&warm_day), Some(&failure)),
        Verdict::Correct
    );
}

#[test]
fn the_third_ski_of_a_type_and_date_is_not_rented() {
    let network = network();
    let mut judge = Judge::new(&network, SEED);
    let data = json!({"date": "2023-11-04", "type": "backcountry"});
    let success = json!({"status": "success"});
    let failure = json!({"status": "failure"});
    assert_eq!(
        judge.judge("skiResort2", "rentSki", &data, Some(&success)),
        Verdict::Correct
    );
    // The answer does not change the reference: the second rental is still right.
    assert!(is_wrong(&judge.judge(
        "skiResort2",
        "rentSki",
        &data,
        Some(&failure)
    )));
    assert!(is_wrong(&judge.judge(
        "skiResort2",
        "rentSki",
        &data,
        Some(&success)
    )));
    assert_eq!(
        judge.judge("skiResort2", "rentSki", &data, Some(&failure)),
        Verdict::Correct
    );
    // Another type, another date, another resort: free.
    let carving = json!({"date": "2023-11-04", "type": "carving"});
    assert_eq!(
        judge.judge("skiResort2", "rentSki", &carving, Some(&success)),
        Verdict::Correct
    );
    assert_eq!(
        judge.judge("skiResort1", "rentSki", &data, Some(&success)),
        Verdict::Correct
    );
}

#[test]
fn a_restaurant_is_suggested_only_when_it_is_open() {
    let network = network();
    let mut judge = Judge::new(&network, SEED);
    let monday = date_where(|d| weekday(d) == Some("Monday"));
    let tuesday = date_where(|d| weekday(d) == Some("Tuesday"));
    let say = |name: &str| json!({"recommendedRestaurant": name});
    // hotel3 recommends Il Forno (closed on Mondays).
    assert_eq!(
        judge.judge(
            "hotel3",
            "suggestRestaurant",
            &json!({"date": tuesday}),
            Some(&say("Il Forno (Italian)"))
        ),
        Verdict::Correct
    );
    assert_eq!(
        judge.judge(
            "hotel3",
            "suggestRestaurant",
            &json!({"date": monday}),
            Some(&say("No restaurant"))
        ),
        Verdict::Correct
    );
    assert!(is_wrong(&judge.judge(
        "hotel3",
        "suggestRestaurant",
        &json!({"date": monday}),
        Some(&say("Il Forno"))
    )));
    // skiResort2 recommends Bengal Delight (closed on Tuesdays).
    assert_eq!(
        judge.judge(
            "skiResort2",
            "suggestRestaurant",
            &json!({"date": monday}),
            Some(&say("bengal delight"))
        ),
        Verdict::Correct
    );
    assert!(is_wrong(&judge.judge(
        "skiResort2",
        "suggestRestaurant",
        &json!({"date": tuesday}),
        Some(&say("Bengal Delight"))
    )));
    assert!(is_wrong(&judge.judge(
        "skiResort2",
        "suggestRestaurant",
        &json!({"date": monday}),
        Some(&say("No restaurant"))
    )));
}

#[test]
fn a_table_is_booked_in_opening_hours_and_once_per_slot() {
    let network = network();
    let mut judge = Judge::new(&network, SEED);
    let sunday = date_where(|d| weekday(d) == Some("Sunday"));
    let monday = date_where(|d| weekday(d) == Some("Monday"));
    let table = |name: &str, date: &str, hour: i64| json!({"fullName": name, "date": date, "numPeople": 2, "hour": hour});
    let success = json!({"status": "success"});
    let failure = json!({"status": "failure", "error": "no"});
    assert_eq!(
        judge.judge(
            "restaurant1",
            "bookTable",
            &table("Toby Smith", &sunday, 19),
            Some(&success)
        ),
        Verdict::Correct
    );
    // The same surname, date and hour a second time: refused.
    assert!(is_wrong(&judge.judge(
        "restaurant1",
        "bookTable",
        &table("Kara Smith", &sunday, 19),
        Some(&success)
    )));
    assert_eq!(
        judge.judge(
            "restaurant1",
            "bookTable",
            &table("Toby Smith", &sunday, 19),
            Some(&failure)
        ),
        Verdict::Correct
    );
    // Closed on Mondays; 22:00 is closing time at Il Forno but open at Royal Oak.
    assert_eq!(
        judge.judge(
            "restaurant1",
            "bookTable",
            &table("Nina Jones", &monday, 19),
            Some(&failure)
        ),
        Verdict::Correct
    );
    assert!(is_wrong(&judge.judge(
        "restaurant1",
        "bookTable",
        &table("Nina Jones", &sunday, 22),
        Some(&success)
    )));
    assert_eq!(
        judge.judge(
            "restaurant2",
            "bookTable",
            &table("Nina Jones", &sunday, 22),
            Some(&success)
        ),
        Verdict::Correct
    );
    assert!(is_wrong(&judge.judge(
        "restaurant2",
        "bookTable",
        &table("Nina Jones", &sunday, 16),
        Some(&success)
    )));
}

#[test]
fn opening_times_list_every_open_day() {
    let network = network();
    let mut judge = Judge::new(&network, SEED);
    let days = agora_judge::mocks::WEEKDAYS;
    let week = |closed: &str, open: i64, close: i64| {
        let list: Vec<Value> = days
            .iter()
            .map(|d| {
                if *d == closed {
                    json!({"day": d, "openingHour": 0, "closingHour": 0})
                } else {
                    json!({"day": d, "openingHour": open, "closingHour": close})
                }
            })
            .collect();
        json!({"openingTimes": list})
    };
    assert_eq!(
        judge.judge(
            "restaurant1",
            "openingTimes",
            &json!({}),
            Some(&week("Monday", 12, 22))
        ),
        Verdict::Correct
    );
    assert_eq!(
        judge.judge(
            "restaurant3",
            "openingTimes",
            &json!({}),
            Some(&week("Tuesday", 17, 23))
        ),
        Verdict::Correct
    );
    assert!(is_wrong(&judge.judge(
        "restaurant1",
        "openingTimes",
        &json!({}),
        Some(&week("Tuesday", 12, 22))
    )));
    assert!(is_wrong(&judge.judge(
        "restaurant2",
        "openingTimes",
        &json!({}),
        Some(&week("Tuesday", 12, 22))
    )));
    let closed_day_left_out =
        json!({"openingTimes": [{"day": "Monday", "openingHour": 17, "closingHour": 23}]});
    assert!(is_wrong(&judge.judge(
        "restaurant2",
        "openingTimes",
        &json!({}),
        Some(&closed_day_left_out)
    )));
}

fn traffic(network: &NetworkSpec, date: &str, place: &str) -> String {
    mock(
        network,
        MockKind::Traffic,
        "trafficInfo",
        json!({"date": date, "location": place}),
    )["traffic"]
        .as_str()
        .unwrap()
        .to_string()
}

fn jammed(level: &str) -> bool {
    level == "heavy" || level == "accident"
}

#[test]
fn an_order_is_delivered_unless_the_traffic_is_heavy() {
    let network = network();
    let mut judge = Judge::new(&network, SEED);
    let today = network.today.clone();
    let cairo = jammed(&traffic(&network, &today, "Cairo"));
    let street = |jam: bool| {
        (1..200)
            .map(|n| format!("{n} Wilson Street"))
            .find(|a| jammed(&traffic(&network, &today, a)) == jam && cairo == jam)
    };
    // Whichever way Cairo's traffic is, an address that agrees with it has one right status.
    let address = street(cairo).unwrap();
    let data = json!({"deliveryAddress": address});
    let right = json!({"status": if cairo { "failure" } else { "success" }});
    let wrong = json!({"status": if cairo { "success" } else { "failure" }});
    assert_eq!(
        judge.judge("restaurant2", "orderEverything", &data, Some(&right)),
        Verdict::Correct
    );
    assert!(is_wrong(&judge.judge(
        "restaurant2",
        "orderEverything",
        &data,
        Some(&wrong)
    )));
}

#[test]
fn movies_are_the_seed_screenings_of_the_date() {
    let network = network();
    let mut judge = Judge::new(&network, SEED);
    let on = |day: &str| json!({"date": [day]});
    let right = json!({"movies": ["Forrest Gump", "Stand by Me", "Silence of the Lambs"]});
    assert_eq!(
        judge.judge(
            "cinema1",
            "availableMovies",
            &on("2024-03-15"),
            Some(&right)
        ),
        Verdict::Correct
    );
    let hard_coded = json!({"movies": ["The Godfather", "The Matrix"]});
    assert!(is_wrong(&judge.judge(
        "cinema2",
        "availableMovies",
        &on("2024-03-15"),
        Some(&hard_coded)
    )));
    assert!(is_wrong(&judge.judge(
        "cinema2",
        "availableMovies",
        &on("2024-03-17"),
        Some(&right)
    )));
    assert_eq!(
        judge.judge(
            "cinema2",
            "availableMovies",
            &on("2024-03-18"),
            Some(&json!({"movies": []}))
        ),
        Verdict::Correct
    );
    assert_eq!(
        judge.judge(
            "cinema2",
            "availableMovies",
            &on("2024-03-17"),
            Some(&json!({"movies": ["stand by me"]}))
        ),
        Verdict::Correct
    );
}

#[test]
fn a_screening_sells_out() {
    let network = network();
    let mut judge = Judge::new(&network, SEED);
    // Stand by Me on 2024-03-17 at 20:00 has 12 tickets.
    let buy = |n: i64| json!({"date": ["2024-03-17"], "hour": 20, "numTickets": n, "movie": "Stand by Me"});
    let success = json!({"status": "success"});
    let failure = json!({"status": "failure", "error": "sold out"});
    assert_eq!(
        judge.judge("cinema1", "buyTickets", &buy(10), Some(&success)),
        Verdict::Correct
    );
    assert!(is_wrong(&judge.judge(
        "cinema1",
        "buyTickets",
        &buy(3),
        Some(&success)
    )));
    assert_eq!(
        judge.judge("cinema1", "buyTickets", &buy(2), Some(&success)),
        Verdict::Correct
    );
    assert_eq!(
        judge.judge("cinema1", "buyTickets", &buy(1), Some(&failure)),
        Verdict::Correct
    );
    // The other cinema still has them; a screening that does not exist sells nothing.
    assert_eq!(
        judge.judge("cinema2", "buyTickets", &buy(12), Some(&success)),
        Verdict::Correct
    );
    let none =
        json!({"date": ["2024-03-18"], "hour": 18, "numTickets": 1, "movie": "Forrest Gump"});
    assert!(is_wrong(&judge.judge(
        "cinema2",
        "buyTickets",
        &none,
        Some(&success)
    )));
}

#[test]
fn a_taxi_costs_its_fare_with_the_surcharges_that_apply() {
    let network = network();
    let today = network.today.clone();
    let taxi = |time: &str| {
        mock(
            &network,
            MockKind::AvailableTaxi,
            "getAvailableTaxi",
            json!({"time": time}),
        )["taxiId"]
            != json!("000")
    };
    // taxi1 at 21:30 (night surcharge); an address whose traffic agrees with New York's.
    let ny = jammed(&traffic(&network, &today, "New York"));
    let address = (1..300)
        .map(|n| format!("{n} Smith Street"))
        .find(|a| jammed(&traffic(&network, &today, a)) == ny)
        .unwrap();
    let time = (0..60).map(|m| format!("21:{m}")).find(|t| {
        let padded = format!("21:{:02}", t[3..].parse::<i64>().unwrap());
        taxi(t) && taxi(&padded)
    });
    let time = time.unwrap();
    let fare = 20.0 * (1.0 + 0.2 + if ny { 0.2 } else { 0.0 });
    let mut judge = Judge::new(&network, SEED);
    let data = json!({"address": address, "time": time});
    let right = json!({"status": "success", "price": fare});
    assert_eq!(
        judge.judge("taxi1", "callTaxi", &data, Some(&right)),
        Verdict::Correct
    );
    let flat = json!({"status": "success", "price": 20});
    assert!(is_wrong(&judge.judge(
        "taxi1",
        "callTaxi",
        &data,
        Some(&flat)
    )));
    assert!(is_wrong(&judge.judge(
        "taxi1",
        "callTaxi",
        &data,
        Some(&json!({"status": "success"}))
    )));
    // No taxi free at a time (either spelling): failure is right, a success wrong.
    let busy = (0..24 * 60)
        .map(|m| (m / 60, m % 60))
        .find(|(h, m)| !taxi(&format!("{h}:{m}")) && !taxi(&format!("{h:02}:{m:02}")))
        .unwrap();
    let data = json!({"address": address, "time": format!("{}:{}", busy.0, busy.1)});
    assert_eq!(
        judge.judge(
            "taxi2",
            "callTaxi",
            &data,
            Some(&json!({"status": "failure"}))
        ),
        Verdict::Correct
    );
    assert!(is_wrong(&judge.judge(
        "taxi2",
        "callTaxi",
        &data,
        Some(&json!({"status": "success", "price": 30}))
    )));
}

#[test]
fn traffic_is_the_mocks() {
    let network = network();
    let mut judge = Judge::new(&network, SEED);
    let data = json!({"date": "2024-03-05", "location": "Zurich"});
    let level = traffic(&network, "2024-03-05", "Zurich");
    assert_eq!(
        judge.judge(
            "trafficServer",
            "getTraffic",
            &data,
            Some(&json!({"traffic": level}))
        ),
        Verdict::Correct
    );
    let other = if level == "clear" { "heavy" } else { "clear" };
    assert!(is_wrong(&judge.judge(
        "trafficServer",
        "getTraffic",
        &data,
        Some(&json!({"traffic": other}))
    )));
}

#[test]
fn no_rule_is_unjudged_and_no_output_failed() {
    let network = network();
    let mut judge = Judge::new(&network, SEED);
    let verdict = judge.judge(
        "weatherServer",
        "currentWeather",
        &json!({}),
        Some(&json!({})),
    );
    assert!(matches!(verdict, Verdict::Unjudged(_)), "{verdict:?}");
    assert!(matches!(
        judge.judge("nowhere", "rentSki", &json!({}), None),
        Verdict::Unjudged(_)
    ));
    let data = json!({"date": "2023-11-04", "type": "racing"});
    assert_eq!(
        judge.judge("skiResort1", "rentSki", &data, None),
        Verdict::Failed
    );
    assert!(is_wrong(&judge.judge(
        "skiResort1",
        "rentSki",
        &data,
        Some(&json!("success"))
    )));
    // The failed query still took a ski in the reference: the third rental fails.
    judge.judge("skiResort1", "rentSki", &data, None);
    assert_eq!(
        judge.judge(
            "skiResort1",
            "rentSki",
            &data,
            Some(&json!({"status": "failure"}))
        ),
        Verdict::Correct
    );
}

/// Writes of one row added to `table`.
fn added(table: &str, row: Value) -> Writes {
    Writes {
        added: vec![TableRow {
            table: table.into(),
            row: row.as_object().unwrap().clone(),
        }],
        removed: Vec::new(),
    }
}

#[test]
fn a_reply_is_held_to_what_the_query_wrote() {
    let network = network();
    let stay = json!({"startDate": "2024-08-11", "endDate": "2024-08-28"});
    let booked = json!({"status": "success", "roomNumber": 101});
    let booking = |room: Value, end: &str| {
        added(
            "Bookings",
            json!({"RoomNumber": room, "StartDate": "2024-08-11", "EndDate": end}),
        )
    };
    // Each case on a fresh judge: the first booking of the stay, room 101 free.
    let room = |reply: &Value, writes: Option<&Writes>| {
        Judge::new(&network, SEED).judge_with_writes(
            "hotel1",
            "bookRoom",
            &stay,
            Some(reply),
            writes,
        )
    };
    assert_eq!(
        room(&booked, Some(&booking(json!(101), "2024-08-28"))),
        Verdict::Correct
    );
    // Not observed: the reply alone.
    assert_eq!(room(&booked, None), Verdict::Correct);
    // A success with no booking, a booking of no room, of a row's text, of another room than
    // the reply says, with another end date, or twice: wrong.
    for writes in [
        Writes::default(),
        booking(Value::Null, "2024-08-28"),
        booking(json!("{\"RoomNumber\":101}"), "2024-08-28"),
        booking(json!(102), "2024-08-28"),
        booking(json!(101), "2024-08-29"),
        Writes {
            added: [
                booking(json!(101), "2024-08-28").added,
                booking(json!(102), "2024-08-28").added,
            ]
            .concat(),
            removed: Vec::new(),
        },
    ] {
        let verdict = room(&booked, Some(&writes));
        assert!(is_wrong(&verdict), "{writes:?}: {verdict:?}");
    }
    // A success that names no room may book any free one.
    assert_eq!(
        room(
            &json!({"status": "success"}),
            Some(&booking(json!(103), "2024-08-28"))
        ),
        Verdict::Correct
    );

    // Skis: two racing skis on a date, then a failure that must write nothing.
    let mut judge = Judge::new(&network, SEED);
    let day = json!({"date": "2024-02-01", "type": "racing"});
    let rental = |ski: &str| {
        added(
            "SkiRentals",
            json!({"SkiId": ski, "StartDate": "2024-02-01", "EndDate": "2024-02-01"}),
        )
    };
    let success = json!({"status": "success"});
    let failure = json!({"status": "failure"});
    let mut rent = |reply: &Value, writes: &Writes| {
        judge.judge_with_writes("skiResort1", "rentSki", &day, Some(reply), Some(writes))
    };
    assert_eq!(rent(&success, &rental("A234")), Verdict::Correct);
    // A234 is rented that day already, and A321 is a carving ski.
    assert!(is_wrong(&rent(&success, &rental("A234"))));
    let mut fresh = Judge::new(&network, SEED);
    assert!(is_wrong(&fresh.judge_with_writes(
        "skiResort1",
        "rentSki",
        &day,
        Some(&success),
        Some(&rental("A321"))
    )));
    // Both racing skis are out now (the reference took A453 above): a failure is right only if
    // it rented nothing.
    assert!(is_wrong(&rent(&failure, &rental("A453"))));
    assert_eq!(rent(&failure, &Writes::default()), Verdict::Correct);

    // A table: the surname, party, date and hour as asked.
    let sunday = date_where(|d| weekday(d) == Some("Sunday"));
    let ask = json!({"fullName": "Toby Smith", "date": sunday, "numPeople": 2, "hour": 19});
    let table = |surname: &str, people: i64| {
        added(
            "Bookings",
            json!({"Surname": surname, "NumPeople": people, "Date": sunday, "Hour": 19}),
        )
    };
    let book = |writes: &Writes| {
        Judge::new(&network, SEED).judge_with_writes(
            "restaurant1",
            "bookTable",
            &ask,
            Some(&success),
            Some(writes),
        )
    };
    assert_eq!(book(&table("Smith", 2)), Verdict::Correct);
    assert_eq!(book(&table("Toby Smith", 2)), Verdict::Correct);
    assert!(is_wrong(&book(&table("Jones", 2))));
    assert!(is_wrong(&book(&table("Smith", 4))));

    // Tickets: the screening's row goes from 12 left to 12 - n.
    let buy = json!({"date": ["2024-03-17"], "hour": 20, "numTickets": 2, "movie": "Stand by Me"});
    let screening = |left: i64| {
        json!({"Date": "2024-03-17", "Hour": 20, "Movie": "Stand by Me", "TicketsLeft": left})
            .as_object()
            .unwrap()
            .clone()
    };
    let sold = |now: i64| Writes {
        added: vec![TableRow {
            table: "Screenings".into(),
            row: screening(now),
        }],
        removed: vec![TableRow {
            table: "Screenings".into(),
            row: screening(12),
        }],
    };
    let tickets = |writes: &Writes| {
        Judge::new(&network, SEED).judge_with_writes(
            "cinema1",
            "buyTickets",
            &buy,
            Some(&success),
            Some(writes),
        )
    };
    assert_eq!(tickets(&sold(10)), Verdict::Correct);
    assert!(is_wrong(&tickets(&sold(11))));
    assert!(is_wrong(&tickets(&Writes::default())));

    // A lookup writes nothing.
    let movies = json!({"movies": ["Forrest Gump", "Stand by Me", "Silence of the Lambs"]});
    let look = |writes: &Writes| {
        Judge::new(&network, SEED).judge_with_writes(
            "cinema1",
            "availableMovies",
            &json!({"date": ["2024-03-15"]}),
            Some(&movies),
            Some(writes),
        )
    };
    assert_eq!(look(&Writes::default()), Verdict::Correct);
    assert!(is_wrong(&look(&sold(10))));
}
