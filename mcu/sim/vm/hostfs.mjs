// A folder of the host as an Emscripten file system, for the twin's flash (mcu/sim/vm/twin.mjs): the port's build has
// MEMFS only. Every call is Node's own synchronous fs call on the folder, so what the VM writes is on the host at
// once and outlives the VM (a soft reset boots a fresh one on the same flash). Errors are thrown as Emscripten's
// errno numbers (the port's C library expects them); the twin's boot code turns them into MicroPython's.

import * as fs from "fs";
import * as path from "path";

// Node's error codes as Emscripten numbers them (its libc's errno values)
const EMSCRIPTEN_ERRNO = {
  EPERM: 63, ENOENT: 44, EIO: 29, EBADF: 8, EAGAIN: 6, EACCES: 2, EBUSY: 10, EEXIST: 20, EXDEV: 75, ENOTDIR: 54,
  EISDIR: 31, EINVAL: 28, ENOSPC: 51, ENOTEMPTY: 55, ENAMETOOLONG: 37, ELOOP: 32, ENXIO: 60, EMFILE: 33,
  EROFS: 69, ETXTBSY: 74,
};
const O_ACCMODE = 3, O_CREAT = 64, O_EXCL = 128, O_TRUNC = 512, O_APPEND = 1024;
const SEEK_CUR = 1, SEEK_END = 2;

export function hostFileSystem(FS) {
  function errno(error) {
    if (error instanceof FS.ErrnoError || !error.code) throw error;
    throw new FS.ErrnoError(EMSCRIPTEN_ERRNO[error.code] ?? EMSCRIPTEN_ERRNO.EIO);
  }

  function host(call) {
    try {
      return call();
    } catch (error) {
      return errno(error);
    }
  }

  function where(node) {
    // the host path of a node: its names up to the mount, under the mount's root folder
    const names = [];
    for (; node.parent !== node; node = node.parent) names.push(node.name);
    return path.join(node.mount.opts.root, ...names.reverse());
  }

  function nodeFor(parent, name, mode, dev) {
    const node = FS.createNode(parent, name, mode, dev);
    node.node_ops = nodeOps;
    node.stream_ops = streamOps;
    return node;
  }

  const nodeOps = {
    getattr(node) {
      const s = host(() => fs.lstatSync(where(node)));
      return {
        dev: s.dev, ino: s.ino, mode: s.mode, nlink: s.nlink, uid: 0, gid: 0, rdev: s.rdev, size: s.size,
        atime: s.atime, mtime: s.mtime, ctime: s.ctime, blksize: 4096, blocks: Math.ceil(s.size / 4096),
      };
    },
    setattr(node, attr) {
      const at = where(node);
      host(() => {
        if (attr.mode !== undefined) fs.chmodSync(at, attr.mode);
        if (attr.size !== undefined) fs.truncateSync(at, attr.size);
        if (attr.mtime) fs.utimesSync(at, attr.atime ?? attr.mtime, attr.mtime);
      });
    },
    lookup(parent, name) {
      const at = path.join(where(parent), name);
      return nodeFor(parent, name, host(() => fs.lstatSync(at)).mode, 0);
    },
    mknod(parent, name, mode, dev) {
      const node = nodeFor(parent, name, mode, dev);
      const at = where(node);
      host(() => (FS.isDir(mode) ? fs.mkdirSync(at, { mode }) : fs.writeFileSync(at, "", { mode, flag: "wx" })));
      return node;
    },
    rename(node, newDir, newName) {
      host(() => fs.renameSync(where(node), path.join(where(newDir), newName)));
      node.name = newName;
    },
    unlink(parent, name) {
      host(() => fs.unlinkSync(path.join(where(parent), name)));
    },
    rmdir(parent, name) {
      host(() => fs.rmdirSync(path.join(where(parent), name)));
    },
    readdir(node) {
      return [".", "..", ...host(() => fs.readdirSync(where(node)))];
    },
    statfs() {
      return { bsize: 4096, frsize: 4096, blocks: 256, bfree: 128, bavail: 128, files: 256, ffree: 128, fsid: 1,
        flags: 0, namelen: 255 };
    },
  };

  const streamOps = {
    open(stream) {
      if (FS.isDir(stream.node.mode)) return;
      // a socket, FIFO, device or link in the root folder is listed but not a file: ENXIO, as Linux says for a
      // socket (a FIFO opened on the host would block the board for good)
      if (!FS.isFile(stream.node.mode)) throw new FS.ErrnoError(EMSCRIPTEN_ERRNO.ENXIO);
      const f = stream.flags;
      const flags = (f & O_ACCMODE) | (f & O_CREAT ? fs.constants.O_CREAT : 0) | (f & O_TRUNC ? fs.constants.O_TRUNC : 0)
        | (f & O_APPEND ? fs.constants.O_APPEND : 0) | (f & O_EXCL ? fs.constants.O_EXCL : 0);
      stream.hostFd = host(() => fs.openSync(where(stream.node), flags));
    },
    close(stream) {
      if (stream.hostFd !== undefined) host(() => fs.closeSync(stream.hostFd));
    },
    read(stream, buffer, offset, length, position) {
      if (!length) return 0;
      const view = new Uint8Array(buffer.buffer, buffer.byteOffset + offset, length);
      return host(() => fs.readSync(stream.hostFd, view, 0, length, position));
    },
    write(stream, buffer, offset, length, position) {
      const view = new Uint8Array(buffer.buffer, buffer.byteOffset + offset, length);
      return host(() => fs.writeSync(stream.hostFd, view, 0, length, position));
    },
    llseek(stream, offset, whence) {
      let position = offset;
      if (whence === SEEK_CUR) position += stream.position;
      else if (whence === SEEK_END && FS.isFile(stream.node.mode)) {
        position += host(() => fs.fstatSync(stream.hostFd)).size;
      }
      if (position < 0) throw new FS.ErrnoError(EMSCRIPTEN_ERRNO.EINVAL);
      return position;
    },
  };

  return {
    mount(mount) {
      return nodeFor(null, "/", host(() => fs.lstatSync(mount.opts.root)).mode, 0);
    },
    createNode: nodeFor,
    node_ops: nodeOps,
    stream_ops: streamOps,
  };
}
