mod crash;
mod example;
mod fingerprint;
mod meta;
mod settle;
mod turn;
