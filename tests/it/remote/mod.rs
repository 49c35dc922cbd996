mod faults;
mod garage_harness;
mod reads;
mod remote_main;
mod repack;
mod tamper;
