mod crash;
mod example;
mod fingerprint;
mod meta;
mod turn;
