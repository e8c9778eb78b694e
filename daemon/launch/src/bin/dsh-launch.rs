//! `dsh-launch`: the launcher on its own, for the core's tests and for running it by hand. dshd
//! runs the same code as itself (`/proc/self/exe` with `argv[0]` `dsh-launch`).

fn main() {
    dsh_launch::main()
}
