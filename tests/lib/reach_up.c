/* A lib/ file that reaches up into the programs: compiled with libpipebench's include path it
 * must fail (tests/lib/reach_up.sh). */
#include "tracks/ranks.h"

int pb_reach_up_probe(void);
int pb_reach_up_probe(void) { return pb__ranks_rank(); }
