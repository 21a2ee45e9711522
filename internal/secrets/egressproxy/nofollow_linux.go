package egressproxy

import "syscall"

const syscallNoFollow = syscall.O_NOFOLLOW
