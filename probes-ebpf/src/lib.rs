//! Types shared between loader's kernel programs and user space. (being written)
#![no_std]
