// LineRelay: copies one child stream (a pipe) to one of gyrerun's own streams, whole
// lines at a time, each optionally prefixed (e.g. "[rank 3] ").
//
// Contract: the owner reads the pipe when poll() says so and calls onReadable(); the
// relay writes every complete line it has with one write(2) per batch, so lines from
// different ranks never mix inside a line. A line longer than kMaxLine is written in
// pieces of kMaxLine bytes, so gyrerun's memory stays bounded: the bytes go out
// unchanged as long as no other relay writes to the same OutputSink meanwhile; if one
// does, a newline ends the piece first and the rest of the long line continues on a new,
// prefixed line (every output line still comes from one rank). At end of file a last
// line without a newline is written with one added. An output error (say, a closed
// stdout) drops that output but does not stop the relay: the ranks must still be
// supervised. The relay owns the read end of the pipe and closes it at EOF.
// Not thread-safe; gyrerun is single-threaded.
#pragma once

#include <cstddef>
#include <string>

namespace gyre::tools {

class LineRelay;

// One of gyrerun's output streams, shared by the relays that write to it: it remembers
// which relay (if any) has written part of a line there without its end.
struct OutputSink {
  int fd;
  LineRelay* openLineOwner = nullptr;
};

class LineRelay {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  // `sink` must outlive the relay.
  LineRelay(int readFd, OutputSink* sink, std::string prefix);
  ~LineRelay();
  LineRelay(const LineRelay&) = delete;
  LineRelay& operator=(const LineRelay&) = delete;

  // The pipe's read end, or -1 once it reached EOF (or failed) and was closed.
  int fd() const { return readFd_; }
  bool open() const { return readFd_ >= 0; }

  // Reads what the pipe has without blocking (the fd is non-blocking) and writes the
  // complete lines. At EOF flushes the partial line and closes the pipe.
  void onReadable();

  // Reads until the pipe would block or ends: used right after the child exited, so
  // that its last words appear before gyrerun's own report of how it died.
  void drain();

  // Writes any partial line and closes the pipe: used when the child is gone but the
  // pipe stays open (a grandchild inherited it) and gyrerun must not wait for it.
  void close();

 private:
  // Writes the complete lines of buffer_ (and overlong pieces); keeps an incomplete
  // tail unless `flushAll`.
  void emitLines(bool flushAll);
  void writeOut(const std::string& bytes);

  int readFd_;
  OutputSink* sink_;
  std::string prefix_;
  std::string buffer_;    // bytes read but not yet written: always a partial line
  bool midLine_ = false;  // a piece of an overlong line was written; no prefix until '\n'
};

}  // namespace gyre::tools
