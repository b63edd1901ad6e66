"""Pure rules of GPU monitoring: when a job is idle and what happens then, the efficiency summary a job keeps,
how samples are rolled up into coarser buckets, and the load a simulated GPU shows. No I/O, no clock: the server
and the agent pass readings and the time in."""
