/* labq.worker._clone: start a job's process born in its cgroup, in one exec (issue 12).

   clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP) on a stack of its own, like glibc's posix_spawn
   but with the cgroup: the child never migrates, so no write to cgroup.procs and none of the RCU grace
   period such a write waits for on an idle host (~10 ms here, cgroup_threadgroup_rwsem). The child
   runs only the C below (no Python, no allocation, raw syscalls for the id changes: glibc's setxid
   would signal the runner's own threads), then execs the command. Order in the child, as
   worker/spawn.py's other paths: signals to default, setsid, stdio, umask, groups/gid/uid, then
   PR_SET_PDEATHSIG (a change of ids clears it), chdir as the user, close the other fds, exec.

   Built where a C compiler is (pyproject.toml's ext-modules, optional); spawn.py falls back to its shell + setpriv chain
   where this module or the kernel's clone3 is missing. x86-64 and aarch64 only (the entry below is
   assembly: the child must start on its own stack, as glibc's __clone3 does). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#define LABQ_CLONE3 1
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#define LABQ_CLONE_VM 0x00000100ULL
#define LABQ_CLONE_VFORK 0x00004000ULL
#define LABQ_CLONE_INTO_CGROUP 0x200000000ULL
#define LABQ_CLOSE_RANGE_CLOEXEC (1U << 2)
#define STACK_SIZE (64 * 1024)

struct labq_clone_args {      /* struct clone_args, CLONE_ARGS_SIZE_VER2 (Linux 5.7) */
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size, cgroup;
};

/* long labq_clone3(struct labq_clone_args *args, size_t size, int (*fn)(void *), void *arg):
   the child calls fn(arg) on args->stack and exits with its result; the parent gets the pid or
   -errno. The syscall keeps every register but the return value (and rcx/r11 on x86-64). */
#if defined(__x86_64__)
__asm__(".text\n"
        ".p2align 4\n"
        ".type labq_clone3,@function\n"
        "labq_clone3:\n"
        "    mov %rdx, %r8\n"
        "    mov %rcx, %r9\n"
        "    mov $435, %eax\n"
        "    syscall\n"
        "    test %rax, %rax\n"
        "    jz 1f\n"
        "    ret\n"
        "1:  xor %ebp, %ebp\n"
        "    and $-16, %rsp\n"
        "    mov %r9, %rdi\n"
        "    call *%r8\n"
        "    mov %eax, %edi\n"
        "    mov $60, %eax\n"
        "    syscall\n"
        "    hlt\n"
        ".size labq_clone3, .-labq_clone3\n");
#else
__asm__(".text\n"
        ".p2align 4\n"
        ".type labq_clone3,%function\n"
        "labq_clone3:\n"
        "    mov x10, x2\n"
        "    mov x11, x3\n"
        "    mov x8, #435\n"
        "    svc #0\n"
        "    cbz x0, 1f\n"
        "    ret\n"
        "1:  mov x29, #0\n"
        "    mov x30, #0\n"
        "    mov x0, x11\n"
        "    blr x10\n"
        "    mov x8, #93\n"
        "    svc #0\n"
        "    brk #0\n"
        ".size labq_clone3, .-labq_clone3\n");
#endif
long labq_clone3(struct labq_clone_args *args, size_t size, int (*fn)(void *), void *arg);

/* What the child needs, all made by the parent before the clone. */
struct child {
    char *const *paths;          /* execve candidates in order (a PATH search done by the parent) */
    char *const *argv, *const *envp;
    const char *cwd;             /* NULL: stay */
    int fds[3];                  /* stdin, stdout, stderr */
    int errpipe;                 /* write end, O_CLOEXEC */
    int umask_;                  /* -1: leave */
    long uid, gid;               /* -1: no change */
    const gid_t *groups;         /* with uid >= 0 */
    long ngroups;
    int pdeathsig;               /* 0: none */
    pid_t parent;
    sigset_t mask;               /* the parent's mask before the clone blocked every signal */
};

enum { ST_SIGNALS = 1, ST_SETSID, ST_STDIO, ST_GROUPS, ST_GID, ST_UID, ST_PDEATHSIG, ST_PARENT, ST_CHDIR,
       ST_FDS, ST_EXEC };

static int fail(const struct child *c, int stage, int err) {
    int msg[2] = {stage, err};
    ssize_t n;
    do {
        n = write(c->errpipe, msg, sizeof msg);
    } while (n < 0 && errno == EINTR);
    return 127;
}

/* Signals a job must start with at default: a handler of the runner's (Python's) would run in a
   process that is not the runner; ignored ones survive exec, and SIGPIPE/SIGXFSZ are ignored by
   every Python process, SIGINT by a horse. */
static int default_signals(void) {
    struct sigaction dfl, old;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < _NSIG; s++) {
        if (s == SIGKILL || s == SIGSTOP || sigaction(s, NULL, &old) != 0)
            continue;       /* EINVAL: glibc's internal signals, which it keeps to itself */
        int ign_reset = s == SIGINT || s == SIGQUIT || s == SIGHUP || s == SIGTERM || s == SIGUSR1 ||
                        s == SIGUSR2 || s == SIGPIPE || s == SIGXFSZ;
        if (old.sa_handler == SIG_DFL || (old.sa_handler == SIG_IGN && !ign_reset))
            continue;
        if (sigaction(s, &dfl, NULL) != 0)
            return -1;
    }
    /* glibc's own two (32, 33), which its sigaction refuses: GNU make leaves them ignored in all it
       starts, and an ignored disposition survives exec. The kernel's struct, zeroed, is SIG_DFL with
       no flags and an empty mask on every layout; its first word is the handler. */
#ifdef __SIGRTMIN
    for (int s = __SIGRTMIN; s < SIGRTMIN; s++) {
        unsigned long kold[4] = {0}, kdfl[4] = {0};
        if (syscall(SYS_rt_sigaction, s, NULL, kold, _NSIG / 8) == 0 && kold[0] == (unsigned long)SIG_IGN &&
            syscall(SYS_rt_sigaction, s, kdfl, NULL, _NSIG / 8) != 0)
            return -1;
    }
#endif
    return 0;
}

static int close_others(int keep) {
    /* Mark every fd above stderr close-on-exec (the error pipe already is); older kernels: close
       all but the pipe. */
    if (syscall(SYS_close_range, 3, ~0U, LABQ_CLOSE_RANGE_CLOEXEC) == 0)
        return 0;
    if (keep > 3 && syscall(SYS_close_range, 3, keep - 1, 0) != 0)
        return -1;
    return syscall(SYS_close_range, keep + 1, ~0U, 0) == 0 ? 0 : -1;
}

static int child_main(void *arg) {
    const struct child *c = arg;
    if (default_signals() != 0)
        return fail(c, ST_SIGNALS, errno);
    if (setsid() < 0)
        return fail(c, ST_SETSID, errno);
    for (int i = 0; i < 3; i++)
        if (dup2(c->fds[i], i) < 0)      /* the parent made sure every fds[i] > 2 */
            return fail(c, ST_STDIO, errno);
    if (c->umask_ >= 0)
        umask((mode_t)c->umask_);
    if (c->uid >= 0) {
        if (syscall(SYS_setgroups, c->ngroups, c->groups) != 0)
            return fail(c, ST_GROUPS, errno);
        if (syscall(SYS_setresgid, c->gid, c->gid, c->gid) != 0)
            return fail(c, ST_GID, errno);
        if (syscall(SYS_setresuid, c->uid, c->uid, c->uid) != 0)
            return fail(c, ST_UID, errno);
    }
    if (c->pdeathsig && syscall(SYS_prctl, PR_SET_PDEATHSIG, c->pdeathsig, 0, 0, 0) != 0)
        return fail(c, ST_PDEATHSIG, errno);
    if (c->pdeathsig && getppid() != c->parent)    /* the runner died before the signal was armed */
        return fail(c, ST_PARENT, ESRCH);
    if (c->cwd && chdir(c->cwd) != 0)
        return fail(c, ST_CHDIR, errno);
    if (close_others(c->errpipe) != 0)
        return fail(c, ST_FDS, errno);
    if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &c->mask, NULL, _NSIG / 8) != 0)
        return fail(c, ST_SIGNALS, errno);
    int err = ENOENT;      /* execvp's rule: EACCES from any candidate wins over ENOENT */
    for (char *const *p = c->paths; *p; p++) {
        execve(*p, c->argv, c->envp);
        if (errno == EACCES)
            err = EACCES;
        else if (errno != ENOENT && errno != ENOTDIR)
            return fail(c, ST_EXEC, errno);
    }
    return fail(c, ST_EXEC, err);
}

/* -- the Python side ------------------------------------------------------------------------- */
static char **cstrings(PyObject *seq, PyObject **keep) {
    /* NULL-terminated char* array of a sequence of bytes; *keep holds the bytes alive. */
    PyObject *fast = PySequence_Fast(seq, "a sequence of bytes");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    char **out = PyMem_Calloc(n + 1, sizeof(char *));
    if (!out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyBytes_Check(b) || memchr(PyBytes_AS_STRING(b), 0, PyBytes_GET_SIZE(b))) {
            PyErr_SetString(PyExc_ValueError, "each item must be bytes without NUL");
            PyMem_Free(out);
            Py_DECREF(fast);
            return NULL;
        }
        out[i] = PyBytes_AS_STRING(b);
    }
    *keep = fast;
    return out;
}

static const char *STAGES[] = {"", "signals", "setsid", "stdio", "setgroups", "setresgid", "setresuid",
                               "PR_SET_PDEATHSIG", "parent gone", "chdir", "close fds", "exec"};

static PyObject *spawn(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"paths", "argv", "envp", "cwd", "stdin", "stdout", "stderr", "cgroup_fd", "umask",
                            "uid", "gid", "groups", "pdeathsig", NULL};
    PyObject *paths_o, *argv_o, *envp_o, *cwd_o, *groups_o = Py_None;
    int fds[3], cgfd = -1, umask_ = -1, pdeathsig = 0;
    long uid = -1, gid = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOiii|iillOi", names, &paths_o, &argv_o, &envp_o, &cwd_o,
                                     &fds[0], &fds[1], &fds[2], &cgfd, &umask_, &uid, &gid, &groups_o, &pdeathsig))
        return NULL;
    for (int i = 0; i < 3; i++)
        if (fds[i] < 3) {
            PyErr_SetString(PyExc_ValueError, "stdio fds must be > 2");
            return NULL;
        }
    PyObject *kp = NULL, *ka = NULL, *ke = NULL;
    char **paths = NULL, **argv = NULL, **envp = NULL;
    gid_t *groups = NULL;
    long ngroups = 0;
    PyObject *result = NULL;
    void *stack = NULL;
    int pipefd[2] = {-1, -1};
    if (!(paths = cstrings(paths_o, &kp)) || !(argv = cstrings(argv_o, &ka)) || !(envp = cstrings(envp_o, &ke)))
        goto done;
    if (cwd_o != Py_None && !PyBytes_Check(cwd_o)) {
        PyErr_SetString(PyExc_TypeError, "cwd must be bytes or None");
        goto done;
    }
    if (uid >= 0 && groups_o != Py_None) {
        PyObject *g = PySequence_Fast(groups_o, "groups");
        if (!g)
            goto done;
        ngroups = PySequence_Fast_GET_SIZE(g);
        groups = PyMem_Calloc(ngroups + 1, sizeof(gid_t));
        for (long i = 0; groups && i < ngroups; i++)
            groups[i] = (gid_t)PyLong_AsLong(PySequence_Fast_GET_ITEM(g, i));
        Py_DECREF(g);
        if (!groups) {
            PyErr_NoMemory();
            goto done;
        }
        if (PyErr_Occurred())
            goto done;
    }
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    for (int i = 0; i < 2; i++)
        if (pipefd[i] < 3) {      /* stdio closed in the runner: keep the pipe clear of the child's dup2 */
            int fd = fcntl(pipefd[i], F_DUPFD_CLOEXEC, 3);
            close(pipefd[i]);
            pipefd[i] = fd;
            if (fd < 0) {
                PyErr_SetFromErrno(PyExc_OSError);
                goto done;
            }
        }
    stack = PyMem_RawMalloc(STACK_SIZE);
    if (!stack) {
        PyErr_NoMemory();
        goto done;
    }
    struct child c = {.paths = paths, .argv = argv, .envp = envp,
                      .cwd = cwd_o == Py_None ? NULL : PyBytes_AS_STRING(cwd_o),
                      .fds = {fds[0], fds[1], fds[2]}, .errpipe = pipefd[1], .umask_ = umask_, .uid = uid,
                      .gid = gid, .groups = groups, .ngroups = ngroups, .pdeathsig = pdeathsig,
                      .parent = getpid()};
    struct labq_clone_args ca;
    memset(&ca, 0, sizeof ca);
    ca.flags = LABQ_CLONE_VM | LABQ_CLONE_VFORK | (cgfd >= 0 ? LABQ_CLONE_INTO_CGROUP : 0);
    ca.exit_signal = SIGCHLD;
    ca.stack = (uint64_t)(uintptr_t)stack;
    ca.stack_size = STACK_SIZE;
    ca.cgroup = cgfd >= 0 ? (uint64_t)cgfd : 0;
    sigset_t all;
    sigfillset(&all);
    /* Nothing of the runner's may run in the child: every signal blocked across the clone (the
       child restores the mask after setting its handlers to default). */
    pthread_sigmask(SIG_SETMASK, &all, &c.mask);
    long pid = labq_clone3(&ca, sizeof ca, child_main, &c);
    pthread_sigmask(SIG_SETMASK, &c.mask, NULL);    /* CLONE_VFORK: the child has exec'd or exited */
    close(pipefd[1]);
    pipefd[1] = -1;
    if (pid < 0) {
        errno = (int)-pid;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    int msg[2];
    ssize_t n;
    do {
        n = read(pipefd[0], msg, sizeof msg);
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof msg) {
        int status;
        while (waitpid((pid_t)pid, &status, 0) < 0 && errno == EINTR)
            ;
        int stage = msg[0] > 0 && msg[0] <= ST_EXEC ? msg[0] : 0;
        PyObject *e = Py_BuildValue("(iss)", msg[1], strerror(msg[1]), STAGES[stage]);
        if (e) {
            PyErr_SetObject(PyExc_OSError, e);
            Py_DECREF(e);
        }
        goto done;
    }
    result = PyLong_FromLong(pid);
done:
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    PyMem_RawFree(stack);
    PyMem_Free(groups);
    PyMem_Free(paths);
    PyMem_Free(argv);
    PyMem_Free(envp);
    Py_XDECREF(kp);
    Py_XDECREF(ka);
    Py_XDECREF(ke);
    return result;
}
#endif

static PyMethodDef methods[] = {
#ifdef LABQ_CLONE3
    {"spawn", (PyCFunction)(void (*)(void))spawn, METH_VARARGS | METH_KEYWORDS,
     "spawn(paths, argv, envp, cwd, stdin, stdout, stderr, cgroup_fd=-1, umask=-1, uid=-1, gid=-1, "
     "groups=None, pdeathsig=0) -> pid: a new session born in the cgroup (a directory fd; -1: ours), "
     "dying with us on pdeathsig, after one exec. OSError(errno, strerror, stage) if the child could "
     "not get to its exec (it is reaped), or from clone3 itself (stage absent)."},
#endif
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_clone", NULL, -1, methods};

PyMODINIT_FUNC PyInit__clone(void) {
    return PyModule_Create(&module);
}
