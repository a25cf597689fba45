// Send and receive between two ranks over their own pair of pipes, in slices.
//
// The call's Tag carries the count, dtype, the sender's rank (call.root) and a sequence
// number counted per ordered pair of ranks (not the communicator's: the other ranks
// take no part), so a receive whose size or dtype differs from the send fails with
// kMismatch on both ranks instead of truncating. A send returns once every slice has
// left this rank (for more than the pipe's slots * slotBytes, once the receiver took
// the rest), like MPI's standard-mode send: two ranks that both send large messages
// to each other before receiving wait for each other until the timeout; use
// sendRecv for exchanges.
#pragma once

#include "ring/primitives.h"

namespace gyre {

void sendTo(const PrimitiveContext& base, const PeerPipes& pipes, const CollectiveCall& call,
            int peer, const void* buf);

void recvFrom(const PrimitiveContext& base, const PeerPipes& pipes, const CollectiveCall& call,
              int peer, void* buf);

// Sends `send` to sendPeer and receives `recv` from recvPeer at once, slice by slice
// (each slice is sent before the matching one is received), so any set of ranks that
// exchange this way in a cycle cannot deadlock. sendPeer may equal recvPeer.
void sendRecv(const PrimitiveContext& base, const PeerPipes& pipes, const CollectiveCall& send,
              int sendPeer, const void* sendbuf, const CollectiveCall& recv, int recvPeer,
              void* recvbuf);

}  // namespace gyre
