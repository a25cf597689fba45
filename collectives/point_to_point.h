// Send and receive between two ranks over their own pair of pipes, in slices.
//
// The call's Tag carries the count, dtype, the sender's rank (call.root) and a sequence
// number counted per ordered pair of ranks (not the communicator's: the other ranks
// take no part), so a receive whose size or dtype differs from the send fails with
// kMismatch at its first slice, before a byte is written (never a truncated or
// overlong message); the sender then fails from the receiver's abort, in its send or
// in its next call. A message of count 0 still moves one empty slice, so it is checked
// like any other. Slices go straight from and into the caller's buffers (the pipes'
// direct forms).
//
// A send returns once every slice has left this rank (flush): at once when the message
// fits in the pipe (slots * slotBytes, and over tcp the kernel's socket buffers), else
// once the receiver took the rest, like MPI's standard-mode send. Two ranks that both
// send large messages to each other before receiving therefore wait for each other
// until the timeout (kTimeout naming the peer); use sendRecv for exchanges.
//
// Threads: called by the communicator's executing thread, as every schedule.
#pragma once

#include "collectives/primitives.h"

namespace gyre {

void sendTo(const PrimitiveContext& base, const PeerPipes& pipes, const CollectiveCall& call,
            int peer, const void* buf);

void recvFrom(const PrimitiveContext& base, const PeerPipes& pipes, const CollectiveCall& call,
              int peer, void* buf);

// Sends `send` to sendPeer and receives `recv` from recvPeer at once, slice by slice
// (slice i is sent before slice i is received), so any set of ranks that exchange this
// way in a cycle cannot deadlock, whatever the sizes and the pipes' capacity. The two
// directions have their own calls (count, dtype, Tag) and each is sliced as the plain
// send or recv it pairs with on the other rank. sendPeer may equal recvPeer. sendbuf
// and recvbuf may overlap: the data to send is then copied aside first.
void sendRecv(const PrimitiveContext& base, const PeerPipes& pipes, const CollectiveCall& send,
              int sendPeer, const void* sendbuf, const CollectiveCall& recv, int recvPeer,
              void* recvbuf);

}  // namespace gyre
