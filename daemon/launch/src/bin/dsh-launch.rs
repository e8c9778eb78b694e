//! `dsh-launch`: the launcher on its own, installed beside `dshd`, which runs every command
//! through it (and through its own binary, run as `dsh-launch`, when there is none).

fn main() {
    dsh_launch::main()
}
