#define HP_ISA scalar
#include "hp/optim/adamw_impl.h"

HP_KERNEL_ENTRY(hp::optim::AdamWTable, HP_ISA::kAdamWTable);
