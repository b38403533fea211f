// A leaf header that includes the layer above it: check_layers must refuse it.
#pragma once
#include "comm/communicator_impl.h"
