mod conventions;
mod exec;
mod json_schema;
mod log;
mod prefix;
mod progress;
mod shell;
mod stats_find;
