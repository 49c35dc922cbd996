//! Text as users read it: names quoted for one-line output ([`quote`]) and times ([`time`]).
//! The ground floor: imports nothing of the crate (the error type renders through it).

pub mod quote;
pub mod time;
