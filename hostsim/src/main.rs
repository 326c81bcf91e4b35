fn main() {
    println!("hostsim");
}
