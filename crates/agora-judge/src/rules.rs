//! The servers' house rules, as data the judge can apply.
//!
//! Each server's rules are written, for its LLM, in its `description` in
//! `demo/network/network.json`; the same rules are written here once more as values (opening
//! hours, the closed weekday, the temperature window for rooms, the restaurant recommended and
//! whose opening rule decides, the taxi fares). A test checks that every value here appears in
//! the server's description, so the two cannot drift apart silently.

/// A restaurant's opening hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opening {
    /// First hour a table can be booked (24-hour clock).
    pub open: i64,
    /// Closing hour: the last bookable hour is the one before.
    pub close: i64,
    /// The weekday it is closed all day (`Monday`, ...).
    pub closed: &'static str,
}

impl Opening {
    /// Open on `weekday`?
    pub fn open_on(&self, weekday: &str) -> bool {
        weekday != self.closed
    }

    /// A table can be booked at `hour` on `weekday`?
    pub fn bookable(&self, weekday: &str, hour: i64) -> bool {
        self.open_on(weekday) && self.open <= hour && hour < self.close
    }
}

/// A server that recommends a restaurant if that restaurant is open on the date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recommendation {
    /// The restaurant's name, as the server says it.
    pub restaurant: &'static str,
    /// The server whose opening rule `isOpen` answers with.
    pub server: &'static str,
}

/// A taxi company's fare.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaxiFare {
    /// The flat price in dollars.
    pub base: f64,
    /// +20 % for a pick-up between 20:00 and 23:00.
    pub night_surcharge: bool,
    /// +20 % if `todayWeather` says rain.
    pub rain_surcharge: bool,
}

impl TaxiFare {
    /// The price with `surcharges` 20 % surcharges (they add up, not compound).
    pub fn price(&self, surcharges: u32) -> f64 {
        self.base * (1.0 + 0.2 * f64::from(surcharges))
    }
}

/// A server's rules.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ServerRules {
    /// The city it is in (the place a correct server names when it asks for weather or traffic).
    pub city: &'static str,
    /// A restaurant's hours.
    pub opening: Option<Opening>,
    /// A ski resort books a room only if the forecast for the start date is within these
    /// bounds (°C, inclusive).
    pub room_temperature: Option<(i64, i64)>,
    /// What it recommends for `suggestRestaurant`.
    pub recommends: Option<Recommendation>,
    /// A taxi company's fare.
    pub taxi: Option<TaxiFare>,
}

/// The rules of the server `id`, if it is one of the network's.
pub fn rules_of(id: &str) -> Option<ServerRules> {
    let in_city = |city| ServerRules {
        city,
        ..ServerRules::default()
    };
    let restaurant = |city, open, close, closed| ServerRules {
        opening: Some(Opening {
            open,
            close,
            closed,
        }),
        ..in_city(city)
    };
    Some(match id {
        "weatherServer" | "trafficServer" | "deliveryService" => ServerRules::default(),
        "hotel1" => in_city("Paris"),
        "hotel2" => in_city("Barcelona"),
        "hotel3" => ServerRules {
            recommends: Some(Recommendation {
                restaurant: "Il Forno",
                server: "restaurant1",
            }),
            ..in_city("London")
        },
        "skiResort1" => ServerRules {
            room_temperature: Some((-10, 1)),
            ..in_city("Zurich")
        },
        "skiResort2" => ServerRules {
            room_temperature: Some((-10, 1)),
            recommends: Some(Recommendation {
                restaurant: "Bengal Delight",
                server: "restaurant3",
            }),
            ..in_city("Vienna")
        },
        "restaurant1" => restaurant("London", 12, 22, "Monday"),
        "restaurant2" => restaurant("Cairo", 17, 23, "Tuesday"),
        "restaurant3" => restaurant("Vienna", 17, 23, "Tuesday"),
        "cinema1" => in_city("Paris"),
        "cinema2" => in_city("Berlin"),
        "taxi1" => ServerRules {
            taxi: Some(TaxiFare {
                base: 20.0,
                night_surcharge: true,
                rain_surcharge: false,
            }),
            ..in_city("New York")
        },
        "taxi2" => ServerRules {
            taxi: Some(TaxiFare {
                base: 30.0,
                night_surcharge: false,
                rain_surcharge: true,
            }),
            ..in_city("London")
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::NetworkSpec;

    /// Every rule value here is written in the server's description (the LLM's copy).
    #[test]
    fn the_rules_are_the_descriptions() {
        let network = NetworkSpec::embedded().expect("network");
        for server in &network.servers {
            let rules = rules_of(&server.id).expect("every server has rules");
            let text = &server.description;
            assert!(text.contains(rules.city), "{}: {}", server.id, rules.city);
            if let Some(opening) = rules.opening {
                let hours = format!("{}:00-{}:00", opening.open, opening.close);
                assert!(text.contains(&hours), "{}: {hours}", server.id);
                assert!(text.contains(opening.closed), "{}", server.id);
            }
            if let Some((low, high)) = rules.room_temperature {
                let window = format!("between {low} and +{high} degrees");
                assert!(text.contains(&window), "{}: {window}", server.id);
            }
            if let Some(recommendation) = rules.recommends {
                assert!(text.contains(recommendation.restaurant), "{}", server.id);
                let restaurant = network.server(recommendation.server).expect("restaurant");
                assert!(
                    restaurant
                        .description
                        .starts_with(recommendation.restaurant)
                );
                assert!(text.contains("isOpen"), "{}", server.id);
            }
            if let Some(fare) = rules.taxi {
                assert!(text.contains(&format!("${}", fare.base)), "{}", server.id);
                assert_eq!(text.contains("20:00 and 23:00"), fare.night_surcharge);
                assert_eq!(text.contains("todayWeather says rain"), fare.rain_surcharge);
                assert!(text.contains("surcharges add up"), "{}", server.id);
            }
            assert_eq!(
                text.contains("between -10 and +1"),
                rules.room_temperature.is_some()
            );
        }
        assert!(rules_of("nobody").is_none());
    }

    #[test]
    fn opening_hours_exclude_the_closing_hour_and_the_closed_day() {
        let il_forno = rules_of("restaurant1")
            .and_then(|r| r.opening)
            .expect("hours");
        assert!(il_forno.bookable("Sunday", 12));
        assert!(il_forno.bookable("Sunday", 21));
        assert!(!il_forno.bookable("Sunday", 22));
        assert!(!il_forno.bookable("Monday", 18));
        assert!(
            (TaxiFare {
                base: 20.0,
                night_surcharge: true,
                rain_surcharge: false
            }
            .price(2)
                - 28.0)
                .abs()
                < 1e-9
        );
    }
}
