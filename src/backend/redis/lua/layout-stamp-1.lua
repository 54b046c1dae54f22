--[[
  layout-stamp: stamps this Conveyor's layout version on one queue (the layout guard, run ahead of
  this body, does the work: see layout_guard in _common.lua). Run for every known queue right
  after an upgrade of the prefix's layout, so processes of an older layout stop at their next call
  on any queue, not only on queues the newer Conveyor has written to since.

  KEYS[1] meta     <base>meta
  ARGV[1] none: the version is the script's own (LAYOUT)
  Returns 0; refuses (CONVEYOR_LAYOUT_TOO_NEW) a queue stamped by a newer layout.
]]
-- Layout 5: the queue's mark in the ready index, for data an older layout wrote without one.
ready_refresh(string.sub(KEYS[1], 1, -5))
return 0
