// Internal spelling of the public Status/Result/Deadline header.
#pragma once
#include <loom/status.hpp>
