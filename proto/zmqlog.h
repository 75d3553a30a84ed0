/*
 * zmqlog: includes <czmq.h> and then log.h, in the one order that compiles.
 *
 * czmq.h pulls in <syslog.h>, whose LOG_INFO and LOG_DEBUG macros (6 and 7) would replace
 * log.h's level enumerators: log_info() would then log at an out-of-range level. Every file
 * that needs both includes this header instead, and must not include <syslog.h> itself.
 */
#ifndef CHATFLEET_ZMQLOG_H
#define CHATFLEET_ZMQLOG_H

#include <czmq.h>

#undef LOG_DEBUG
#undef LOG_INFO

#include "log.h"

#endif
